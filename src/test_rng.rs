//! A reproducible pseudo-random stream for the tests that compare a fast path with its plain
//! definition on generated inputs (a 64-bit linear congruential generator with Knuth's MMIX
//! constants; the high bits are the ones returned).

/// The generator's state.
pub(crate) struct Lcg(pub(crate) u64);

impl Lcg {
    /// The next number of the stream.
    pub(crate) fn next(&mut self) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        usize::try_from(self.0 >> 33).unwrap_or(usize::MAX)
    }

    /// The next number of the stream, below `n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.next() % n
    }
}

/// A stream started at `seed`: each call gives the next number.
pub(crate) fn lcg(seed: u64) -> impl FnMut() -> usize {
    let mut state = Lcg(seed);
    move || state.next()
}

/// What a generated text is made of: characters, or pieces of text.
pub(crate) trait Piece {
    /// Appends this piece to `out`.
    fn push_onto(&self, out: &mut String);
}

impl Piece for char {
    fn push_onto(&self, out: &mut String) {
        out.push(*self);
    }
}

impl Piece for &str {
    fn push_onto(&self, out: &mut String) {
        out.push_str(self);
    }
}

/// A text of `next() % below` pieces, each drawn from `pieces` with `next() % pieces.len()`:
/// the length first, then each piece in turn.
pub(crate) fn text_of<P: Piece>(
    next: &mut dyn FnMut() -> usize,
    pieces: &[P],
    below: usize,
) -> String {
    let mut out = String::new();
    for _ in 0..next() % below {
        pieces[next() % pieces.len()].push_onto(&mut out);
    }
    out
}
