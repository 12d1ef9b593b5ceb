//! Files a user hands gepa-lab (experiments, datasets, prompts, rubrics, schemas, images, keys,
//! run directories) are checked before they are read. A FIFO blocks its reader until someone
//! writes, a device such as `/dev/zero` never ends, and a huge file read whole exhausts memory
//! before any error can name it. So every input is opened here, in one of two ways:
//! - [`read_text`] and [`read_bytes`]: a small file read whole, refused when it is larger than
//!   its kind allows;
//! - [`open_stream`]: a file read as a stream (a dataset, a run's tables and cache), of any size,
//!   whose physical lines are bounded instead, so a file of zeros with no line break is an
//!   error after [`MAX_LINE`] bytes rather than one allocation of all of it.
//!
//! Every refusal is an `io::Error` (of kind `InvalidInput` or `InvalidData`) whose message says
//! what was found, so the callers' own errors, which already name the file, carry it unchanged.
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

/// Experiment files, prompt files, rubrics and JSON schemas: text a person writes.
pub const TEXT_LIMIT: u64 = 8 << 20;
/// `run.json`, which lists every execution of a matrix with its plan.
pub const MANIFEST_LIMIT: u64 = 256 << 20;
/// An image sent to a vision model.
pub const IMAGE_LIMIT: u64 = 32 << 20;
/// The longest physical line of a streamed file: a CSV record may hold a long document, but
/// not 16 MiB without a line break.
pub const MAX_LINE: usize = 16 << 20;

/// What `path` is, when it is not a regular file: the words of the refusal.
fn kind_of(metadata: &std::fs::Metadata) -> Option<&'static str> {
    let kind = metadata.file_type();
    if kind.is_file() {
        return None;
    }
    if kind.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if kind.is_char_device() {
            return Some("a character device");
        }
        if kind.is_block_device() {
            return Some("a block device");
        }
        if kind.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

/// The metadata of `path` when it is a regular file (following symbolic links), else an error
/// that says what it is; a missing file keeps its `NotFound` error, so callers that treat
/// absence as empty still can. Checked before a file is opened: opening a FIFO blocks until the
/// other end appears, and a device such as `/dev/zero` never ends.
pub fn regular_file(path: &Path) -> io::Result<std::fs::Metadata> {
    let metadata = std::fs::metadata(path)?;
    match kind_of(&metadata) {
        Some(kind) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{kind}, not a regular file"),
        )),
        None => Ok(metadata),
    }
}

/// Opens `path` for reading when it is a regular file (see [`regular_file`]).
pub fn open_regular(path: &Path) -> io::Result<File> {
    regular_file(path)?;
    File::open(path)
}

/// Reads a small file whole: at most `limit` bytes, else an error that says its size.
pub fn read_bytes(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let too_large = |size: u64| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is more than the {} such a file may hold",
                bytes(size),
                bytes(limit)
            ),
        )
    };
    let size = file.metadata()?.len();
    if size > limit {
        return Err(too_large(size));
    }
    // The size can change after it was read (a file still being written): read one byte past
    // the limit to know.
    let mut content = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(limit + 1).read_to_end(&mut content)?;
    if content.len() as u64 > limit {
        return Err(too_large(content.len() as u64));
    }
    Ok(content)
}

/// Reads a small UTF-8 text file whole (see [`read_bytes`]).
pub fn read_text(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_bytes(path, limit)?).map_err(|err| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (byte {} is not valid UTF-8)",
                err.utf8_error().valid_up_to() + 1
            ),
        )
    })
}

/// Opens a regular file for streaming, buffered, with lines of at most [`MAX_LINE`] bytes.
pub fn open_stream(path: &Path) -> io::Result<LineLimited<BufReader<File>>> {
    let file = open_regular(path)?;
    Ok(LineLimited::new(
        BufReader::with_capacity(1 << 16, file),
        MAX_LINE,
    ))
}

/// Reads the next physical line of `reader` into `line` (cleared first), its line feed
/// included when it has one. A line longer than `limit` bytes is read past to its end but not
/// kept: `line` is then empty and the answer says so. Returns how many bytes the line took in
/// the file (0 at the end of the file) and whether it was kept; memory holds at most `limit`
/// bytes of it, however long it is.
pub fn read_line_within(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    limit: usize,
) -> io::Result<(u64, bool)> {
    line.clear();
    let mut consumed = 0u64;
    let mut kept = true;
    loop {
        let buffer = match reader.fill_buf() {
            Ok(buffer) => buffer,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if buffer.is_empty() {
            break;
        }
        let (take, ended) = match memchr::memchr(b'\n', buffer) {
            Some(at) => (at + 1, true),
            None => (buffer.len(), false),
        };
        if kept && line.len() + take <= limit {
            line.extend_from_slice(&buffer[..take]);
        } else {
            kept = false;
            line.clear();
        }
        reader.consume(take);
        consumed += take as u64;
        if ended {
            break;
        }
    }
    Ok((consumed, kept))
}

/// A reader that fails once a physical line (bytes between line feeds) grows past a limit.
#[derive(Debug)]
pub struct LineLimited<R> {
    inner: R,
    limit: usize,
    /// Bytes since the last line feed.
    line: usize,
}

impl<R> LineLimited<R> {
    pub fn new(inner: R, limit: usize) -> Self {
        LineLimited {
            inner,
            limit,
            line: 0,
        }
    }
}

impl<R: Read> Read for LineLimited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf)?;
        let chunk = &buf[..read];
        // Line feeds found a word at a time: this reader sits under every CSV file read.
        let mut start = 0;
        for at in memchr::memchr_iter(b'\n', chunk) {
            self.check(self.line + (at - start))?;
            self.line = 0;
            start = at + 1;
        }
        self.line += chunk.len() - start;
        self.check(self.line)?;
        Ok(read)
    }
}

impl<R> LineLimited<R> {
    /// Fails when a line of `line` bytes is past the limit.
    fn check(&self, line: usize) -> io::Result<()> {
        if line > self.limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a line longer than {} with no line break: not a text file of records",
                    bytes(self.limit as u64)
                ),
            ));
        }
        Ok(())
    }
}

/// `8 MiB`, `2.0 GiB`, `512 bytes`.
fn bytes(size: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if size >= GIB {
        format!("{:.1} GiB", size as f64 / GIB as f64)
    } else if size >= MIB && size.is_multiple_of(MIB) {
        format!("{} MiB", size / MIB)
    } else if size >= MIB {
        format!("{:.1} MiB", size as f64 / MIB as f64)
    } else {
        format!("{size} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(err: io::Error) -> String {
        err.to_string()
    }

    #[test]
    fn devices_directories_and_fifos_are_refused_before_they_are_opened() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_text(dir.path(), TEXT_LIMIT).unwrap_err();
        assert!(message(err).contains("a directory"));
        let err = read_text(Path::new("/dev/zero"), TEXT_LIMIT).unwrap_err();
        assert!(message(err).contains("a character device"));
        assert!(open_stream(Path::new("/dev/zero")).is_err());
        let fifo = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|status| status.success()) {
            // Would block for ever if it were opened.
            let err = open_stream(&fifo).unwrap_err();
            assert!(message(err).contains("a FIFO"), "refused without a writer");
        }
        let missing = read_text(&dir.path().join("none.txt"), TEXT_LIMIT).unwrap_err();
        assert_eq!(
            missing.kind(),
            io::ErrorKind::NotFound,
            "absence stays absence"
        );
    }

    #[test]
    fn a_file_past_its_limit_is_refused_with_its_size_and_a_sparse_one_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.txt");
        let file = File::create(&path).unwrap();
        file.set_len(3 << 30).unwrap(); // 3 GiB of zeros, no disk used
        let err = read_text(&path, TEXT_LIMIT).unwrap_err();
        assert_eq!(
            message(err),
            "3.0 GiB is more than the 8 MiB such a file may hold"
        );
        // Streamed, the zeros are one line: refused after MAX_LINE bytes, not 3 GiB.
        let mut stream = open_stream(&path).unwrap();
        let mut sink = Vec::new();
        let err = stream.read_to_end(&mut sink).unwrap_err();
        assert!(message(err).contains("a line longer than 16 MiB"));
        assert!(sink.len() <= MAX_LINE + (1 << 16));
    }

    #[test]
    fn text_within_its_limit_reads_whole_and_lines_may_be_long_but_not_endless() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ok.txt");
        std::fs::write(&path, "héllo\n").unwrap();
        assert_eq!(read_text(&path, 7).unwrap(), "héllo\n");
        assert!(read_text(&path, 6).is_err(), "7 bytes is more than 6");
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(message(read_text(&path, 8).unwrap_err()).contains("not UTF-8"));

        let lines = b"aaaa\nbbbb\ncccc".repeat(3);
        let mut limited = LineLimited::new(&lines[..], 14);
        let mut out = Vec::new();
        limited.read_to_end(&mut out).unwrap();
        assert_eq!(out, lines);
        let mut limited = LineLimited::new(&b"aaaaaa\n"[..], 5);
        assert!(limited.read_to_end(&mut Vec::new()).is_err());
    }

    /// Hands out its bytes at most three at a time, so that lines span reads.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(buf.len()).min(3);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_line_is_measured_across_reads() {
        let read = |text: &[u8], limit: usize| {
            LineLimited::new(Trickle(text), limit).read_to_end(&mut Vec::new())
        };
        assert_eq!(read(b"aaaaa\nbbbbb\nccccc", 5).unwrap(), 17);
        assert!(
            read(b"aaaaa\nbbbbbb\nc", 5).is_err(),
            "the second line has 6"
        );
        assert!(
            read(b"a\naaaaaa", 5).is_err(),
            "the last line has 6, unended"
        );
        assert_eq!(read(b"\n\n\n", 0).unwrap(), 3, "empty lines");
    }

    #[test]
    fn a_line_past_the_limit_is_read_past_not_kept() {
        let text = b"short\nmuch too long\nok\nunended".repeat(2);
        let mut reader = BufReader::with_capacity(4, Trickle(&text));
        let mut line = Vec::new();
        let mut lines = Vec::new();
        loop {
            let (length, kept) = read_line_within(&mut reader, &mut line, 8).unwrap();
            if length == 0 {
                break;
            }
            lines.push((length, kept, String::from_utf8(line.clone()).unwrap()));
        }
        let once = [
            (6, true, "short\n"),
            (14, false, ""),
            (3, true, "ok\n"),
            (13, false, ""),
        ];
        let expected: Vec<(u64, bool, String)> = once
            .iter()
            .map(|&(n, kept, text)| (n, kept, text.to_owned()))
            .collect();
        // "unended" and the second "short" join into one line of 13 bytes.
        assert_eq!(lines[..4], expected[..]);
        assert_eq!(lines.len(), 7);
        assert_eq!(
            lines[6],
            (7, true, "unended".to_owned()),
            "the last line, unended"
        );
    }
}
