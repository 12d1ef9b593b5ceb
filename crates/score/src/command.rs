//! The `command:<program>` scorer: the user's own program scores each answer.
//!
//! The program is started once, on the first answer, in the experiment file's folder, and kept
//! running. For each answer gepa-lab writes one JSON line to its standard input,
//! `{"row": 12, "answer": "...", "expected": "..."}` (`row` is the 1-based data row of the
//! dataset, or null where there is none), and reads one JSON line back from its standard output,
//! `{"score": 0.5, "feedback": "..."}`, with a score from 0 to 1 (`feedback` may be left out).
//! Its standard error is the user's terminal. An answer it takes longer than [`TIME_LIMIT`] to
//! score, a line that is not such an object, or a program that exits is an error for that
//! answer, never a score; the program is started again for the next answer.
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use serde::Deserialize;

use super::{Score, ScorerError};

/// How long the program may take to score one answer.
pub const TIME_LIMIT: Duration = Duration::from_secs(30);

/// Checks that the command's program can be found: a path (with a `/`) relative to `dir`, or a
/// name on the PATH. Whether it works shows with the first answer.
pub fn find_program(command: &str, dir: &Path) -> Result<(), String> {
    let Some(program) = command.split_whitespace().next() else {
        return Err("the scorer command names no program".into());
    };
    let found = if program.contains('/') {
        dir.join(program).is_file()
    } else {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
    };
    if found {
        Ok(())
    } else {
        Err(format!(
            "program `{program}` not found ({})",
            if program.contains('/') {
                format!("looked in {}", dir.display())
            } else {
                "not on the PATH".to_owned()
            }
        ))
    }
}

/// The program, started on first use.
#[derive(Debug)]
pub struct CommandScorer {
    command: String,
    dir: PathBuf,
    time_limit: Duration,
    running: Mutex<Option<Running>>,
}

#[derive(Debug)]
struct Running {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<std::io::Result<String>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        // Closing stdin lets a well-behaved program end; one that does not is killed.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    score: f64,
    #[serde(default)]
    feedback: String,
}

impl CommandScorer {
    pub fn new(command: &str, dir: &Path) -> Self {
        Self::with_time_limit(command, dir, TIME_LIMIT)
    }

    pub fn with_time_limit(command: &str, dir: &Path, time_limit: Duration) -> Self {
        Self {
            command: command.to_owned(),
            dir: dir.to_owned(),
            time_limit,
            running: Mutex::new(None),
        }
    }

    fn error(&self, message: impl Into<String>) -> ScorerError {
        ScorerError::Command {
            command: self.command.clone(),
            message: message.into(),
        }
    }

    fn start(&self) -> Result<Running, ScorerError> {
        let words: Vec<&str> = self.command.split_whitespace().collect();
        let Some((program, args)) = words.split_first() else {
            return Err(self.error("no program given"));
        };
        let mut child = Command::new(program)
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|err| {
                self.error(format!(
                    "cannot start it (in {}): {err}",
                    self.dir.display()
                ))
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(self.error("its standard input and output could not be connected"));
        };
        // A thread reads the replies, so that a reply can be waited for with a time limit.
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Running {
            child,
            stdin,
            lines,
        })
    }

    /// Scores one answer; on any failure the program is stopped, to be started again next time.
    pub fn score(
        &self,
        row: Option<usize>,
        output: &str,
        expected: &str,
    ) -> Result<Score, ScorerError> {
        let mut slot = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut running = match slot.take() {
            Some(running) => running,
            None => self.start()?,
        };
        let result = self.exchange(&mut running, row, output, expected);
        if result.is_ok() {
            *slot = Some(running);
        }
        result
    }

    fn exchange(
        &self,
        running: &mut Running,
        row: Option<usize>,
        output: &str,
        expected: &str,
    ) -> Result<Score, ScorerError> {
        let mut line = serde_json::to_vec(&serde_json::json!({
            "row": row,
            "answer": output,
            "expected": expected,
        }))
        .map_err(|err| self.error(err.to_string()))?;
        line.push(b'\n');
        running
            .stdin
            .write_all(&line)
            .and_then(|()| running.stdin.flush())
            .map_err(|err| self.error(format!("writing to it failed ({err}); did it exit?")))?;
        let reply = match running.lines.recv_timeout(self.time_limit) {
            Ok(Ok(reply)) => reply,
            Ok(Err(err)) => return Err(self.error(format!("reading its output failed: {err}"))),
            Err(RecvTimeoutError::Timeout) => {
                return Err(self.error(format!(
                    "no reply within {} s",
                    self.time_limit.as_secs_f64()
                )));
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = running
                    .child
                    .wait()
                    .map_or_else(|e| e.to_string(), |s| s.to_string());
                return Err(self.error(format!("it exited ({status}) without a reply")));
            }
        };
        let shown: String = reply.chars().take(200).collect();
        let parsed: Reply = serde_json::from_str(&reply).map_err(|err| {
            self.error(format!(
                "its reply {shown:?} is not a JSON object {{\"score\": <0 to 1>, \"feedback\": \"...\"}}: {err}"
            ))
        })?;
        if !(0.0..=1.0).contains(&parsed.score) {
            return Err(self.error(format!(
                "its score {} is outside 0 to 1 (reply {shown:?})",
                parsed.score
            )));
        }
        Ok(Score {
            value: parsed.score,
            feedback: parsed.feedback,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scorer written in shell: one reply per line, by the rules of `script`.
    fn scorer(script: &str, limit: Duration) -> (tempfile::TempDir, CommandScorer) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("score.sh"), script).unwrap();
        let scorer = CommandScorer::with_time_limit("sh score.sh", dir.path(), limit);
        (dir, scorer)
    }

    #[test]
    fn the_program_runs_once_and_scores_each_answer() {
        // Counts the lines it read: it is started once for all three answers.
        let (_dir, scorer) = scorer(
            r#"n=0
while read -r line; do
  n=$((n+1))
  case "$line" in
    *'"answer":"yes"'*'"expected":"yes"'*) echo "{\"score\": 1, \"feedback\": \"right, line $n\"}" ;;
    *'"row":4'*) echo "{\"score\": 0.25, \"feedback\": \"row 4, line $n\"}" ;;
    *) echo "{\"score\": 0}" ;;
  esac
done
"#,
            Duration::from_secs(10),
        );
        let right = scorer.score(Some(3), "yes", "yes").unwrap();
        assert_eq!(right.value, 1.0);
        assert_eq!(right.feedback, "right, line 1");
        let wrong = scorer.score(Some(4), "no", "yes").unwrap();
        assert_eq!(wrong.value, 0.25);
        assert_eq!(wrong.feedback, "row 4, line 2", "the row is sent");
        assert_eq!(
            scorer.score(None, "yes", "yes").unwrap().feedback,
            "right, line 3"
        );
    }

    #[test]
    fn a_bad_reply_a_slow_one_or_an_exit_is_an_error_never_a_score() {
        let (_dir, bad) = scorer(
            "while read -r line; do echo 'score: 1'; done\n",
            Duration::from_secs(10),
        );
        let err = bad.score(Some(1), "a", "b").unwrap_err().to_string();
        assert!(
            err.contains("sh score.sh") && err.contains("is not a JSON object"),
            "{err}"
        );

        let (_dir, high) = scorer(
            "while read -r line; do echo '{\"score\": 7}'; done\n",
            Duration::from_secs(10),
        );
        let err = high.score(Some(1), "a", "b").unwrap_err().to_string();
        assert!(err.contains("its score 7 is outside 0 to 1"), "{err}");

        let (_dir, slow) = scorer(
            "while read -r line; do sleep 5; done\n",
            Duration::from_millis(300),
        );
        let err = slow.score(Some(1), "a", "b").unwrap_err().to_string();
        assert!(err.contains("no reply within 0.3 s"), "{err}");

        let (_dir, gone) = scorer("exit 3\n", Duration::from_secs(10));
        let err = gone.score(Some(1), "a", "b").unwrap_err().to_string();
        assert!(err.contains("exit"), "{err}");

        let missing = CommandScorer::new("no-such-program-here", Path::new("."));
        let err = missing.score(None, "a", "b").unwrap_err().to_string();
        assert!(err.contains("cannot start it"), "{err}");
    }
}
