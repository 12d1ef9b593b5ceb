//! Which line a record starts on, in files with Windows line ends too.
//!
//! The csv crate ends a record at the CR of a CR LF and counts the LF into the next record, after
//! it has noted where that record starts: in a file with Windows line ends (as Excel writes
//! them), every data row was reported one line before its own. [`LineEnds`] passes the bytes on
//! unchanged (a value that spans lines keeps its CR LF, as written) and notes where each CR LF's
//! LF is, so that [`line_at`] can tell a record that starts at one and count it.
use std::collections::VecDeque;
use std::io::{Read, Result};

/// More LFs than the csv crate can read ahead of the record it returns (its buffer is 8 KiB):
/// offsets older than these belong to records already read, and are let go.
const KEPT: usize = 1 << 16;

/// A reader that passes its bytes on unchanged and notes the offsets of the LFs of CR LF pairs.
pub struct LineEnds<R> {
    inner: R,
    /// Bytes passed on so far: the offset of the next one.
    passed: u64,
    last_was_cr: bool,
    /// Offsets of LFs that follow a CR, in file order, from the oldest record not yet asked about.
    pair_lfs: VecDeque<u64>,
}

impl<R: Read> LineEnds<R> {
    pub fn new(inner: R) -> Self {
        LineEnds {
            inner,
            passed: 0,
            last_was_cr: false,
            pair_lfs: VecDeque::new(),
        }
    }

    pub fn into_inner(self) -> R {
        self.inner
    }

    /// Whether the byte at `offset` is the LF of a CR LF. Offsets must be asked in file order:
    /// those before `offset` are let go.
    fn pair_lf_at(&mut self, offset: u64) -> bool {
        while self.pair_lfs.front().is_some_and(|&at| at < offset) {
            self.pair_lfs.pop_front();
        }
        self.pair_lfs.front() == Some(&offset)
    }
}

impl<R: Read> Read for LineEnds<R> {
    fn read(&mut self, out: &mut [u8]) -> Result<usize> {
        let read = self.inner.read(out)?;
        for (at, &byte) in out[..read].iter().enumerate() {
            if byte == b'\n' && self.last_was_cr {
                if self.pair_lfs.len() == KEPT {
                    self.pair_lfs.pop_front();
                }
                self.pair_lfs.push_back(self.passed + at as u64);
            }
            self.last_was_cr = byte == b'\r';
        }
        self.passed += read as u64;
        Ok(read)
    }
}

/// The 1-based line of the file where the record read by `reader` at `position` starts; 0 when
/// the position is unknown. Ask for records in file order.
pub fn line_at<R: Read>(
    reader: &mut csv::Reader<LineEnds<R>>,
    position: Option<&csv::Position>,
) -> u64 {
    position.map_or(0, |position| {
        // A record noted at the LF of the CR LF that ended the record before starts a line on.
        position.line() + u64::from(reader.get_mut().pair_lf_at(position.byte()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gives its bytes `step` at a time, so that pairs fall across reads.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> Result<usize> {
            let n = self.step.min(out.len()).min(self.bytes.len());
            out[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    #[test]
    fn bytes_pass_unchanged_and_each_pair_lf_is_found_however_the_reads_fall() {
        let input = b"a,b\r\n\"x\r\ny\",1\r\nlone\rcr,2\n\rend\r\n";
        for step in 1..=input.len() {
            let mut reader = LineEnds::new(Trickle { bytes: input, step });
            let mut passed = Vec::new();
            reader.read_to_end(&mut passed).unwrap();
            assert_eq!(passed, input, "read {step} bytes at a time");
            let found: Vec<u64> = (0..input.len() as u64)
                .filter(|&at| reader.pair_lf_at(at))
                .collect();
            assert_eq!(found, [4, 8, 14, 30], "read {step} bytes at a time");
        }
    }
}
