{{/* Names ------------------------------------------------------------------------------ */}}

{{- define "stackgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "stackgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "stackgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "stackgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stackgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "stackgate.labels" -}}
helm.sh/chart: {{ include "stackgate.chart" . }}
{{ include "stackgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: stackgate
{{- end }}

{{- define "stackgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "stackgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "stackgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* TLS ---------------------------------------------------------------------------------- */}}

{{/* Secret mounted into the pods (tls.crt, tls.key, ca.crt). */}}
{{- define "stackgate.tlsSecretName" -}}
{{- if eq .Values.tls.mode "existingSecret" }}
{{- required "tls.existingSecret.name is required when tls.mode=existingSecret" .Values.tls.existingSecret.name }}
{{- else }}
{{- printf "%s-tls" (include "stackgate.fullname" .) }}
{{- end }}
{{- end }}

{{/* DNS names the apiserver may use for the Service. */}}
{{- define "stackgate.dnsNames" -}}
{{- $svc := include "stackgate.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson }}
{{- end }}

{{/* Kubernetes features ------------------------------------------------------------------ */}}

{{/* "true" when the webhooks carry matchConditions. */}}
{{- define "stackgate.matchConditions" -}}
{{- $mc := .Values.webhooks.matchConditions }}
{{- if eq (toString $mc) "auto" }}
{{- semverCompare ">=1.28.0-0" .Capabilities.KubeVersion.Version }}
{{- else }}
{{- toString $mc }}
{{- end }}
{{- end }}

{{/* Policies ----------------------------------------------------------------------------- */}}

{{/* The mounted policy files as a dict name -> content (chart files + overrides). */}}
{{- define "stackgate.policyFiles" -}}
{{- $files := dict }}
{{- range $path, $_ := .Files.Glob "files/policies/*.yaml" }}
{{- $_ := set $files (base $path) ($.Files.Get $path) }}
{{- end }}
{{- range $name, $content := .Values.policies.overrides }}
{{- if $content }}
{{- $_ := set $files $name $content }}
{{- else }}
{{- $_ := unset $files $name }}
{{- end }}
{{- end }}
{{- toJson $files }}
{{- end }}

{{/*
The policy files the server runs with, as JSON name -> content: the mounted set, or the chart's
copy of policies/ (which is what the binary embeds) when policies.useEmbedded is true.
*/}}
{{- define "stackgate.effectivePolicyFiles" -}}
{{- if .Values.policies.useEmbedded }}
{{- $files := dict }}
{{- range $path, $_ := .Files.Glob "files/policies/*.yaml" }}
{{- $_ := set $files (base $path) ($.Files.Get $path) }}
{{- end }}
{{- toJson $files }}
{{- else }}
{{- include "stackgate.policyFiles" . }}
{{- end }}
{{- end }}

{{/*
The CloudConfigSites document the server will run with: the one in the mounted set, or (like
the server) the embedded default when the mounted set has none or the embedded set is used.
Rendered as JSON {"sites": [...], "label": "..."}.
*/}}
{{- define "stackgate.sites" -}}
{{- $found := dict }}
{{- range $name, $content := (include "stackgate.effectivePolicyFiles" . | fromJson) }}
{{- $doc := fromYaml $content }}
{{- if eq (toString (index $doc "kind")) "CloudConfigSites" }}
{{- $found = $doc }}
{{- end }}
{{- end }}
{{- if not $found }}
{{- /* like the server: a set without sites uses the embedded default sites */}}
{{- range $path, $_ := .Files.Glob "files/policies/*.yaml" }}
{{- $doc := fromYaml ($.Files.Get $path) }}
{{- if eq (toString (index $doc "kind")) "CloudConfigSites" }}
{{- $found = $doc }}
{{- end }}
{{- end }}
{{- end }}
{{- if not $found }}
{{- fail "no CloudConfigSites document in files/policies/: the cloud-config webhooks need the site list (copy policies/ into charts/stackgate/files/policies/)" }}
{{- end }}
{{- dict "sites" (default list (index $found "sites")) "label" (default "" (index $found "label")) "valuesLabel" (default "" (index $found "valuesLabel")) | toJson }}
{{- end }}

{{/*
How a container running the OpenStack CCM is recognised, as JSON {"images": [...], "args": [...]}:
params.ccmImages / params.ccmArgs of the ccm-concurrency and cluster-name policies of the set, plus
ccmWorkloads.match (matched against the image and against command/args).
*/}}
{{- define "stackgate.ccmMatch" -}}
{{- $images := list }}
{{- $args := list }}
{{- range $name, $content := (include "stackgate.effectivePolicyFiles" . | fromJson) }}
{{- $doc := fromYaml $content }}
{{- if has (toString (index $doc "rule")) (list "ccm-concurrency" "cluster-name") }}
{{- $params := default dict (index $doc "params") }}
{{- $images = concat $images (default list (index $params "ccmImages")) }}
{{- $args = concat $args (default list (index $params "ccmArgs")) }}
{{- end }}
{{- end }}
{{- $images = concat $images .Values.ccmWorkloads.match | uniq }}
{{- $args = concat $args $images | uniq }}
{{- range concat $images $args }}
{{- if or (contains "'" .) (contains "\\" .) }}
{{- fail (printf "CCM match string %q must not contain a quote or a backslash" .) }}
{{- end }}
{{- end }}
{{- dict "images" $images "args" $args | toJson }}
{{- end }}

{{/* Webhook building blocks -------------------------------------------------------------- */}}

{{/*
namespaceSelector shared by every webhook: never the release namespace, never an exempted
namespace; plus extra terms (a list of matchExpressions) passed as "extra".
*/}}
{{- define "stackgate.namespaceSelector" -}}
{{- $root := .root }}
{{- $excluded := concat (list $root.Release.Namespace) $root.Values.webhooks.excludeNamespaces | uniq }}
{{- $exprs := list
      (dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" $excluded)
      (dict "key" $root.Values.webhooks.exemptNamespaceLabel "operator" "NotIn" "values" (list "true")) }}
{{- with $root.Values.webhooks.onlyNamespaces }}
{{- if has $root.Release.Namespace . }}
{{- fail "webhooks.onlyNamespaces must not contain the release namespace: stackgate never admits its own namespace" }}
{{- end }}
{{- $exprs = append $exprs (dict "key" "kubernetes.io/metadata.name" "operator" "In" "values" (. | uniq | sortAlpha)) }}
{{- end }}
{{- $exprs = concat $exprs .extra -}}
namespaceSelector:
  matchExpressions:
    {{- toYaml $exprs | nindent 4 }}
{{- end }}

{{/* Fields every webhook entry has. Args: root, path, timeout, failurePolicy. */}}
{{- define "stackgate.webhookCommon" -}}
{{- $root := .root -}}
admissionReviewVersions: ["v1"]
sideEffects: None
matchPolicy: Equivalent
timeoutSeconds: {{ .timeout }}
failurePolicy: {{ .failurePolicy }}
clientConfig:
  service:
    name: {{ include "stackgate.fullname" $root }}
    namespace: {{ $root.Release.Namespace }}
    path: {{ .path }}
    port: {{ $root.Values.service.port }}
  {{- with .caBundle }}
  caBundle: {{ . }}
  {{- end }}
{{- end }}

{{/* CEL: the container c runs the OpenStack CCM (by its image, or its command or args). */}}
{{- define "stackgate.celCcmContainer" -}}
{{- $m := include "stackgate.ccmMatch" . | fromJson }}
{{- $image := list }}
{{- range $m.images }}
{{- $image = append $image (printf "c.image.contains('%s')" .) }}
{{- end }}
{{- $arg := list }}
{{- range $m.args }}
{{- $arg = append $arg (printf "a.contains('%s')" .) }}
{{- end }}
{{- $args := join " || " $arg }}
{{- printf "(has(c.image) && (%s)) || (has(c.command) && c.command.exists(a, %s)) || (has(c.args) && c.args.exists(a, %s))" (join " || " $image) $args $args }}
{{- end }}

{{/* Seconds in a server duration ("500ms", "2s", "1m", "1h"; a bare number is seconds). */}}
{{- define "stackgate.durationSeconds" -}}
{{- $s := toString . | trim }}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" $s }}
{{- $unit := trimPrefix $n $s }}
{{- if not $n }}
{{- fail (printf "%q is not a duration like 500ms, 2s or 1m" $s) }}
{{- else if eq $unit "ms" }}
{{- divf $n 1000 }}
{{- else if or (eq $unit "s") (eq $unit "") }}
{{- float64 $n }}
{{- else if eq $unit "m" }}
{{- mulf $n 60 }}
{{- else if eq $unit "h" }}
{{- mulf $n 3600 }}
{{- else }}
{{- fail (printf "%q: the unit must be ms, s, m or h" $s) }}
{{- end }}
{{- end }}
