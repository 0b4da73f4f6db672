// Command gcfg-oracle is stackgate's reference for differential tests: it reads OpenStack CCM
// cloud configs with the real gcfg (gopkg.in/gcfg.v1 v1.2.3, Debian golang-gopkg-gcfg.v1-dev)
// exactly the way the CCM does — gcfg.ReadInto on a reader (so a UTF-8 BOM is NOT skipped),
// filtered by FatalOnly — into a struct with the CCM's sections, fields, tags and types.
//
// Usage: gcfg-oracle PATH...   (a directory stands for the regular files in it, sorted by name)
//
// For every file it prints one JSON object on its own line:
//
//	file     the path as read
//	starts   true when gcfg returned no fatal error (the CCM gets past reading its config)
//	fatal    the fatal error text, if any
//	ignored  the "extra data" warnings FatalOnly drops, each split into section / subsection /
//	         variable plus the original text (only known when the file starts: gcfg stops
//	         collecting at the first fatal error)
//	serial   effective [LoadBalancer] provider-requires-serial-api-calls
//	config   every field as gcfg stored it (zero values where unset; durations in ns)
//
// Build with tests/../.ci/gcfg-oracle.sh (GOPATH mode, Debian packages only).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	gcfg "gopkg.in/gcfg.v1"
	warnings "gopkg.in/warnings.v0"
)

// nanos stands in for the CCM's util.MyDuration: gcfg hands it the decoded text, which goes
// through time.ParseDuration; any error is fatal.
type nanos int64

func (n *nanos) UnmarshalText(text []byte) error {
	d, err := time.ParseDuration(string(text))
	if err != nil {
		return err
	}
	*n = nanos(d)
	return nil
}

// Sections. Field names, gcfg tags and Go types follow CPO pkg/client/client.go (AuthOpts),
// pkg/openstack/openstack.go (LoadBalancerOpts, LBClass, Route, Networking) and
// pkg/util/metadata/metadata.go. Untagged fields bind by (case-folded) field name.
type (
	authSection struct {
		AuthURL          string `gcfg:"auth-url" json:"auth-url"`
		UserID           string `gcfg:"user-id" json:"user-id"`
		Username         string `json:"username"`
		Password         string `json:"password"`
		TenantID         string `gcfg:"tenant-id" json:"tenant-id"`
		TenantName       string `gcfg:"tenant-name" json:"tenant-name"`
		TrustID          string `gcfg:"trust-id" json:"trust-id"`
		TrusteeID        string `gcfg:"trustee-id" json:"trustee-id"`
		TrusteePassword  string `gcfg:"trustee-password" json:"trustee-password"`
		DomainID         string `gcfg:"domain-id" json:"domain-id"`
		DomainName       string `gcfg:"domain-name" json:"domain-name"`
		TenantDomainID   string `gcfg:"tenant-domain-id" json:"tenant-domain-id"`
		TenantDomainName string `gcfg:"tenant-domain-name" json:"tenant-domain-name"`
		UserDomainID     string `gcfg:"user-domain-id" json:"user-domain-id"`
		UserDomainName   string `gcfg:"user-domain-name" json:"user-domain-name"`
		Region           string `json:"region"`
		EndpointType     string `gcfg:"os-endpoint-type" json:"os-endpoint-type"`
		CAFile           string `gcfg:"ca-file" json:"ca-file"`
		TLSInsecure      string `gcfg:"tls-insecure" json:"tls-insecure"`
		Token            string `gcfg:"token" json:"token"`
		CertFile         string `gcfg:"cert-file" json:"cert-file"`
		KeyFile          string `gcfg:"key-file" json:"key-file"`
		UseClouds        bool   `gcfg:"use-clouds" json:"use-clouds"`
		CloudsFile       string `gcfg:"clouds-file" json:"clouds-file"`
		Cloud            string `gcfg:"cloud" json:"cloud"`
		AppCredID        string `gcfg:"application-credential-id" json:"application-credential-id"`
		AppCredName      string `gcfg:"application-credential-name" json:"application-credential-name"`
		AppCredSecret    string `gcfg:"application-credential-secret" json:"application-credential-secret"`
		CAFileContents   string `json:"cafilecontents"`
	}

	lbSection struct {
		Enabled               bool   `gcfg:"enabled" json:"enabled"`
		LBVersion             string `gcfg:"lb-version" json:"lb-version"`
		SubnetID              string `gcfg:"subnet-id" json:"subnet-id"`
		MemberSubnetID        string `gcfg:"member-subnet-id" json:"member-subnet-id"`
		NetworkID             string `gcfg:"network-id" json:"network-id"`
		FloatingNetworkID     string `gcfg:"floating-network-id" json:"floating-network-id"`
		FloatingSubnetID      string `gcfg:"floating-subnet-id" json:"floating-subnet-id"`
		FloatingSubnet        string `gcfg:"floating-subnet" json:"floating-subnet"`
		FloatingSubnetTags    string `gcfg:"floating-subnet-tags" json:"floating-subnet-tags"`
		LBMethod              string `gcfg:"lb-method" json:"lb-method"`
		LBProvider            string `gcfg:"lb-provider" json:"lb-provider"`
		CreateMonitor         bool   `gcfg:"create-monitor" json:"create-monitor"`
		MonitorDelay          nanos  `gcfg:"monitor-delay" json:"monitor-delay"`
		MonitorTimeout        nanos  `gcfg:"monitor-timeout" json:"monitor-timeout"`
		MonitorMaxRetries     uint   `gcfg:"monitor-max-retries" json:"monitor-max-retries"`
		MonitorMaxRetriesDown uint   `gcfg:"monitor-max-retries-down" json:"monitor-max-retries-down"`
		ManageSecurityGroups  bool   `gcfg:"manage-security-groups" json:"manage-security-groups"`
		InternalLB            bool   `gcfg:"internal-lb" json:"internal-lb"`
		NodeSelector          string `gcfg:"node-selector" json:"node-selector"`
		CascadeDelete         bool   `gcfg:"cascade-delete" json:"cascade-delete"`
		FlavorID              string `gcfg:"flavor-id" json:"flavor-id"`
		AvailabilityZone      string `gcfg:"availability-zone" json:"availability-zone"`
		EnableIngressHostname bool   `gcfg:"enable-ingress-hostname" json:"enable-ingress-hostname"`
		IngressHostnameSuffix string `gcfg:"ingress-hostname-suffix" json:"ingress-hostname-suffix"`
		MaxSharedLB           int    `gcfg:"max-shared-lb" json:"max-shared-lb"`
		ContainerStore        string `gcfg:"container-store" json:"container-store"`
		SerialAPICalls        bool   `gcfg:"provider-requires-serial-api-calls" json:"provider-requires-serial-api-calls"`
		DefaultTLSContainer   string `gcfg:"default-tls-container-ref" json:"default-tls-container-ref"`
	}

	lbClassSection struct {
		FloatingNetworkID  string `gcfg:"floating-network-id" json:"floating-network-id"`
		FloatingSubnetID   string `gcfg:"floating-subnet-id" json:"floating-subnet-id"`
		FloatingSubnet     string `gcfg:"floating-subnet" json:"floating-subnet"`
		FloatingSubnetTags string `gcfg:"floating-subnet-tags" json:"floating-subnet-tags"`
		NetworkID          string `gcfg:"network-id" json:"network-id"`
		SubnetID           string `gcfg:"subnet-id" json:"subnet-id"`
		MemberSubnetID     string `gcfg:"member-subnet-id" json:"member-subnet-id"`
	}

	routeSection struct {
		RouterID string `gcfg:"router-id" json:"router-id"`
	}

	metadataSection struct {
		SearchOrder    string `gcfg:"search-order" json:"search-order"`
		RequestTimeout nanos  `gcfg:"request-timeout" json:"request-timeout"`
	}

	networkingSection struct {
		IPv6SupportDisabled bool     `gcfg:"ipv6-support-disabled" json:"ipv6-support-disabled"`
		PublicNetworkName   []string `gcfg:"public-network-name" json:"public-network-name"`
		InternalNetworkName []string `gcfg:"internal-network-name" json:"internal-network-name"`
		AddressSortOrder    string   `gcfg:"address-sort-order" json:"address-sort-order"`
	}
)

// cloudConfig is the CCM's top-level Config: each field is a section, matched by field name.
type cloudConfig struct {
	Global            authSection
	LoadBalancer      lbSection
	LoadBalancerClass map[string]*lbClassSection
	Route             routeSection
	Metadata          metadataSection
	Networking        networkingSection
}

// dropped is one "extra data" warning, taken apart.
type dropped struct {
	Section    string  `json:"section"`
	Subsection *string `json:"subsection,omitempty"`
	Variable   *string `json:"variable,omitempty"`
	Text       string  `json:"text"`
}

type result struct {
	File    string       `json:"file"`
	Starts  bool         `json:"starts"`
	Fatal   string       `json:"fatal,omitempty"`
	Ignored []dropped    `json:"ignored"`
	Serial  bool         `json:"serial"`
	Config  *cloudConfig `json:"config,omitempty"`
}

// splitExtraData takes apart gcfg's `can't store data at section "S"[, subsection "U"][,
// variable "V"]`. Section and variable names are identifiers (no quotes); the subsection can
// hold anything, so the variable is taken from the end.
func splitExtraData(text string) dropped {
	d := dropped{Text: text}
	const head = `can't store data at section "`
	rest := strings.TrimPrefix(text, head)
	if rest == text {
		return d
	}
	end := strings.IndexByte(rest, '"')
	if end < 0 {
		return d
	}
	d.Section, rest = rest[:end], rest[end+1:]
	const varMark = `, variable "`
	if i := strings.LastIndex(rest, varMark); i >= 0 && strings.HasSuffix(rest, `"`) {
		v := rest[i+len(varMark) : len(rest)-1]
		if !strings.Contains(v, `"`) {
			d.Variable = &v
			rest = rest[:i]
		}
	}
	const subMark = `, subsection "`
	if strings.HasPrefix(rest, subMark) && strings.HasSuffix(rest, `"`) && len(rest) > len(subMark) {
		s := rest[len(subMark) : len(rest)-1]
		d.Subsection = &s
	}
	return d
}

func readOne(path string) (result, error) {
	res := result{File: path, Ignored: []dropped{}}
	fh, err := os.Open(path)
	if err != nil {
		return res, err
	}
	defer fh.Close()
	cfg := new(cloudConfig)
	readErr := gcfg.ReadInto(cfg, bufio.NewReader(fh))
	if fatal := warnings.FatalOnly(readErr); fatal != nil {
		res.Fatal = fatal.Error()
		return res, nil
	}
	res.Starts = true
	for _, w := range warnings.WarningsOnly(readErr) {
		res.Ignored = append(res.Ignored, splitExtraData(w.Error()))
	}
	res.Serial = cfg.LoadBalancer.SerialAPICalls
	res.Config = cfg
	return res, nil
}

// expand turns the arguments into the list of files to read.
func expand(args []string) ([]string, error) {
	var files []string
	for _, arg := range args {
		info, err := os.Stat(arg)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			files = append(files, arg)
			continue
		}
		entries, err := os.ReadDir(arg)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, e := range entries {
			if e.Type().IsRegular() {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			files = append(files, filepath.Join(arg, n))
		}
	}
	return files, nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gcfg-oracle FILE|DIR...")
		os.Exit(2)
	}
	files, err := expand(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "gcfg-oracle:", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for _, f := range files {
		res, err := readOne(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gcfg-oracle:", err)
			os.Exit(2)
		}
		if err := enc.Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, "gcfg-oracle:", err)
			os.Exit(2)
		}
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "gcfg-oracle:", err)
		os.Exit(2)
	}
}
