//! The guard against prompts that memorize examples: a child may not add a word pair that the
//! engine has seen in only a few of the dataset's inputs.
//!
//! A small reflection model, shown a failure, often writes a rule tied to that one row ("When
//! the input includes the words "<two words of the post>", answer X"). Such a rule fixes the row
//! it was written from, so it passes the minibatch, and says nothing about the task, so its gain
//! cannot carry to new rows. The measure is the project's own (`quotes_inputs.py` in the shared
//! tools, and the quality benchmark): the lowercase words `[a-z0-9@#']+`, the pairs of adjacent
//! words (of one line, here: the measure also pairs the last word of a line with the first of
//! the next, which in a prompt is its layout; see `quoted_pair`), and a pair counts when at
//! least one of its words is neither in the seed prompt nor a stop word. The engine sees only
//! the feedback and Pareto rows, never the holdout, so it counts a pair found in 1 to
//! [`RARE_INPUTS`] of those rows as quoted: a pair the rows it sees hold that rarely is rare in
//! the dataset as a whole, unless the sample is unlucky.
//!
//! Word pairs miss a list of single words: `answer ham: "Hey", "meet", "bugis", "smth"` (from a
//! public SMS sample) quotes four messages and pairs none of their words. So a span in quotation
//! marks that the seed does not have, whose words stand in that order in 1 to [`RARE_INPUTS`]
//! inputs, is a quote too.
//!
//! The rows the engine sees are a sample: a pair in none of them can be in a few of the others.
//! The pairs the measure found in the benchmark's evolved prompts (rounds 4 to 7) were in none
//! of the 80 rows the engine saw and in 1 to 3 of the 240 in the file; four of the five were a
//! stop word beside a word of the inputs ("about a", "set a", "to set", "looking for"; the
//! fifth was "information about"). Such a pair is ordinary English around a word the inputs
//! use, and so the likeliest to stand in a few inputs the engine has not seen. So a stop word
//! beside a word of the inputs (not of the seed) is a [`Quote::Phrase`] unless the pair is in
//! more than [`RARE_INPUTS`] of the rows seen.
//! Measured on the five public datasets, with init's seeds, 23 rules written in the form the 1.5B
//! model uses ("When the input asks to set a reminder or an alarm, answer utility.") and 50
//! random samples of 80 of the 240 rows each: of the rule-samples the measure flags on the whole
//! file, the pairs alone let 51% through, pairs and phrases 5%; phrases also refuse 26% of the
//! rule-samples the measure does not flag.

use std::collections::{HashMap, HashSet};

use super::records::ProposalFailure;

/// A pair found in at most this many inputs is tied to those inputs, not to the task.
pub(crate) const RARE_INPUTS: usize = 3;

/// A word of at least this many letters, in exactly one of the inputs seen and not in the seed,
/// is a quote of that input ([`Quote::Word`]): a glossary of such words ("vertigo, prism,
/// phenylalanine, meteorologists" from a public question sample) lists single inputs, and no
/// pair of it is in any input. The project's measure counts a word of 5+ letters in 1 or 2 of
/// the whole file's inputs; the engine sees about a third of the rows, so a word in one of them
/// is likely in 1 to 3 of the file, and a word in two or more likely in more.
pub(crate) const RARE_WORD_LETTERS: usize = 5;

/// The commonest English words (SCOWL sizes 10 and 20, about 11,000 with their inflections;
/// `scripts/common-words.py`). A word of this list is not a quote of an input on its own, nor
/// beside a stop word: in the benchmark runs of 2026-11-28 the single-word and phrase rules
/// refused "technology", "company", "provides", "given", "news or" and "technology or" from
/// rules a reader calls general, on a news-topic dataset where the engine sees 80 of 240 rows
/// and so meets many general words in only one of them. Names (capitalised in SCOWL, absent
/// here) and rare words ("phenylalanine", "automakers", "bugis") stay quotes. Pairs are not
/// affected: two words found together in a few inputs are the measure's quote whatever they are.
static COMMON_ENGLISH: std::sync::LazyLock<HashSet<&'static str>> =
    std::sync::LazyLock::new(|| {
        include_str!("common_words.txt")
            .lines()
            .filter(|line| !line.starts_with('#'))
            .collect()
    });

/// Whether `word` (lowercase) is one of the commonest English words ([`COMMON_ENGLISH`]).
fn common_english(word: &str) -> bool {
    COMMON_ENGLISH.contains(word)
}

/// Words too common to tie a pair to an input (the measure's own list).
const STOP_WORDS: &str = "a an the is are was were be been of in on at to for from by with and \
    or not no there it its this that these those when if then as any all some every each do does \
    did has have had i you he she we they me my your our their his her them us";

/// Words of the prompts themselves, never a quote alone (the shared measure's list).
const FRAME_WORDS: &str = "rules answer answers input inputs label labels example examples about";

/// The word pairs of the inputs the engine sees, each with the number of inputs it occurs in.
#[derive(Debug, Clone, Default)]
pub(crate) struct InputPairs {
    inputs_with: HashMap<(String, String), usize>,
    /// The seed's words and the stop words: a pair of two of them is never a quote.
    common: HashSet<String>,
    /// Each input's words, for quoted spans.
    inputs: Vec<Vec<String>>,
    /// The number of inputs each word occurs in.
    inputs_with_word: HashMap<String, usize>,
    /// [`STOP_WORDS`], for the phrase check.
    stop_words: HashSet<String>,
    /// The lines the engine writes itself ([`Self::with_own_wording`]).
    own_lines: Vec<String>,
    /// The quoted spans of the seed, as words: the seed's own quotes are not the child's.
    seed_spans: HashSet<Vec<String>>,
}

impl InputPairs {
    /// Counts the pairs of `inputs` (one text per dataset row, its input values joined by a
    /// space) against the words of `seed`.
    pub(crate) fn new<'a>(seed: &str, inputs: impl IntoIterator<Item = &'a str>) -> Self {
        let mut inputs_with: HashMap<(String, String), usize> = HashMap::new();
        let mut inputs_with_word: HashMap<String, usize> = HashMap::new();
        let mut input_words = Vec::new();
        for input in inputs {
            let words = words(input);
            for pair in pairs(&words) {
                *inputs_with.entry(pair).or_default() += 1;
            }
            for word in words.iter().collect::<HashSet<_>>() {
                *inputs_with_word.entry(word.clone()).or_default() += 1;
            }
            input_words.push(words);
        }
        let common = words(seed)
            .into_iter()
            .chain(STOP_WORDS.split_whitespace().map(str::to_owned))
            .collect();
        Self {
            inputs_with,
            common,
            inputs: input_words,
            inputs_with_word,
            stop_words: STOP_WORDS.split_whitespace().map(str::to_owned).collect(),
            own_lines: Vec::new(),
            seed_spans: quoted_spans(seed).into_iter().collect(),
        }
    }

    /// The adjacent pairs of `words` that are not two seed or stop words.
    fn new_pairs<'w>(
        &'w self,
        words: &'w [String],
    ) -> impl Iterator<Item = (&'w String, &'w String)> + 'w {
        words.windows(2).filter_map(move |pair| match pair {
            [first, second] if !(self.common.contains(first) && self.common.contains(second)) => {
                Some((first, second))
            }
            _ => None,
        })
    }

    /// The same, knowing the lines the engine itself puts into prompts (a glossary's heading):
    /// such a line is the engine's wording, fixed before any row was seen, so no quote is read
    /// in it. It used to count for [`Quote::Pair`]: an AG News sample of 480 rows holds "is
    /// about" in one of the 80 rows the engine saw (a fox "that is about the size of a house
    /// cat"), and the glossary heading `What each answer is about:` then refused every subject
    /// of every label in the four runs of those rows that saw it (the benchmark's rounds 21, 22
    /// and 25, and round 26 with the labels as numbers).
    pub(crate) fn with_own_wording(mut self, lines: &[&str]) -> Self {
        self.own_lines = lines.iter().map(|line| line.trim().to_owned()).collect();
        self
    }

    /// The first word pair of `prompt` that quotes a few inputs, then the first stop word
    /// beside a word of the inputs ([`Quote::Phrase`]), then the first span in quotation marks
    /// that the seed lacks and whose words stand in that order in a few inputs.
    pub(crate) fn quoted(&self, prompt: &str) -> Option<Quote> {
        self.quoted_pair(prompt)
            .or_else(|| self.quoted_phrase(prompt))
            .or_else(|| self.quoted_span(prompt))
            .or_else(|| self.quoted_word(prompt))
    }

    /// The inputs that hold `first` and `second` side by side.
    fn pair_inputs(&self, first: &str, second: &str) -> usize {
        self.inputs_with
            .get(&(first.to_owned(), second.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// The words of each line of `prompt` less the engine's own lines: what the prompt's
    /// writer wrote.
    fn written_lines(&self, prompt: &str) -> Vec<Vec<String>> {
        prompt
            .lines()
            .filter(|line| !self.own_lines.iter().any(|own| own == line.trim()))
            .map(words)
            .collect()
    }

    /// The first new word pair of a line that 1 to [`RARE_INPUTS`] inputs hold.
    ///
    /// A pair is two words of one line, the engine's own lines left out. A line break ends what
    /// its writer wrote: the last word of the engine's `Rules:` heading and the first of the
    /// rule below it (`rules when`) are the prompt's layout, not a phrase of an input. Read
    /// across lines, that pair in one of the 80 rows seen (an AG News sample of 480 rows,
    /// 2026-11-29) refused 21 of a run's 27 rules, every one that began with "When".
    fn quoted_pair(&self, prompt: &str) -> Option<Quote> {
        self.written_lines(prompt).into_iter().find_map(|words| {
            self.new_pairs(&words).find_map(|(first, second)| {
                let inputs = self.pair_inputs(first, second);
                (1..=RARE_INPUTS).contains(&inputs).then(|| Quote::Pair {
                    pair: format!("{first} {second}"),
                    inputs,
                })
            })
        })
    }

    /// The first new pair of a stop word beside a word few inputs use; the prompt is read
    /// without the engine's own lines.
    fn quoted_phrase(&self, prompt: &str) -> Option<Quote> {
        let lines = self.written_lines(prompt);
        lines
            .iter()
            .find_map(|written| self.quoted_phrase_of_line(written))
    }

    /// [`Self::quoted_phrase`] in the words of one line.
    fn quoted_phrase_of_line(&self, written: &[String]) -> Option<Quote> {
        self.new_pairs(written).find_map(|(first, second)| {
            let stop = |word: &String| self.stop_words.contains(word);
            let word = match (stop(first), stop(second)) {
                (true, false) => second,
                (false, true) => first,
                _ => return None,
            };
            let word_inputs = self.inputs_with_word.get(word).copied().unwrap_or(0);
            let inputs = self.pair_inputs(first, second);
            // A stop word beside a word many inputs use ("technology or", "oil or" of a
            // news topic task) is a general rule's English; beside a word of a few, it is
            // how those few put it.
            let rare = inputs <= RARE_INPUTS && word_inputs <= RARE_INPUTS;
            let general = self.common.contains(word) || common_english(word);
            (word_inputs > 0 && !general && rare).then(|| Quote::Phrase {
                pair: format!("{first} {second}"),
                word: word.clone(),
                word_inputs,
                inputs,
            })
        })
    }

    /// The first span in quotation marks, not in the seed, whose words stand in that order in
    /// 1 to [`RARE_INPUTS`] inputs.
    fn quoted_span(&self, prompt: &str) -> Option<Quote> {
        quoted_spans(prompt)
            .into_iter()
            .filter(|span| !self.seed_spans.contains(span))
            .find_map(|span| {
                let inputs = self
                    .inputs
                    .iter()
                    .filter(|input| input.windows(span.len()).any(|run| run == span))
                    .count();
                (1..=RARE_INPUTS).contains(&inputs).then(|| Quote::Span {
                    span: span.join(" "),
                    inputs,
                })
            })
    }

    /// The first long, uncommon word that a single input holds. The engine's own lines and
    /// the words every prompt of this kind uses are not quotes of an input (the shared measure
    /// leaves the same frame words out).
    fn quoted_word(&self, prompt: &str) -> Option<Quote> {
        self.written_lines(prompt)
            .into_iter()
            .flatten()
            .find_map(|word| {
                let single = self.inputs_with_word.get(&word).copied() == Some(1);
                let ours = self.common.contains(&word) || FRAME_WORDS.split(' ').any(|f| f == word);
                let long = word.chars().count() >= RARE_WORD_LETTERS;
                (single && long && !ours && !common_english(&word)).then_some(Quote::Word { word })
            })
    }
}

/// What ties a prompt to a few of the inputs the engine sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Quote {
    /// Two adjacent words found together in 1 to [`RARE_INPUTS`] inputs.
    Pair { pair: String, inputs: usize },
    /// A stop word beside a word found in `word_inputs` inputs, the pair in `inputs` of them
    /// (at most [`RARE_INPUTS`]): the way a few inputs the engine has not seen may put it.
    Phrase {
        pair: String,
        word: String,
        word_inputs: usize,
        inputs: usize,
    },
    /// A span in quotation marks whose words stand in that order in 1 to [`RARE_INPUTS`] inputs.
    Span { span: String, inputs: usize },
    /// A word of [`RARE_WORD_LETTERS`] or more found in exactly one input.
    Word { word: String },
}

impl From<Quote> for ProposalFailure {
    fn from(quote: Quote) -> Self {
        match quote {
            Quote::Pair { pair, inputs } | Quote::Span { span: pair, inputs } => {
                Self::QuotesInputs { pair, inputs }
            }
            Quote::Word { word } => Self::QuotesInputs {
                pair: word,
                inputs: 1,
            },
            Quote::Phrase {
                pair,
                word,
                word_inputs,
                inputs,
            } => Self::QuotesPhrase {
                pair,
                word,
                word_inputs,
                inputs,
            },
        }
    }
}

/// The words of every span of `text` between quotation marks (`"..."`, curly `“...”`, or single
/// `'...'`: the 1.5B model wrote "words like 'lyric', 'simpson', 'bar', or 'night'" from
/// clickbait headlines), spans without a word left out.
fn quoted_spans(text: &str) -> Vec<Vec<String>> {
    let straight = text.split('"').skip(1).step_by(2);
    let curly = text
        .split('\u{201c}')
        .skip(1)
        .filter_map(|rest| rest.split_once('\u{201d}').map(|(span, _)| span));
    straight
        .chain(curly)
        .chain(single_quoted(text))
        .map(words)
        .filter(|span| !span.is_empty())
        .collect()
}

/// The spans of `text` in single quotes: a quote that no letter or digit comes before and one
/// comes after opens a span, and the next quote with a letter or digit before it and none after
/// closes it. An apostrophe inside a word ("don't") does neither.
fn single_quoted(text: &str) -> Vec<&str> {
    let joins = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let mut spans = Vec::new();
    let mut open = None;
    for (at, c) in text.char_indices() {
        if c != '\'' {
            continue;
        }
        let before = joins(text[..at].chars().next_back());
        let after = joins(text[at + 1..].chars().next());
        match open {
            None if !before && after => open = Some(at + 1),
            Some(start) if before && !after => {
                spans.push(&text[start..at]);
                open = None;
            }
            _ => {}
        }
    }
    spans
}

/// The lowercase words of `text`: runs of ASCII letters, digits, `@`, `#` and `'`.
fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '@' | '#' | '\'')))
        .filter(|word| !word.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The distinct pairs of adjacent words.
fn pairs(words: &[String]) -> HashSet<(String, String)> {
    words
        .windows(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str =
        "Text: {text}\nAnswer with exactly one of: joy, sadness. Give only the answer.";

    fn rows() -> InputPairs {
        let mut inputs = vec![
            "Lost my keys at Camden Market again",
            "The rain ruined the picnic",
            "Finally got the job offer!",
        ];
        // A pair in four inputs is common enough to be about the task.
        inputs.extend(["so happy today"; 4]);
        InputPairs::new(SEED, inputs)
    }

    fn pair(pair: &str, inputs: usize) -> Quote {
        Quote::Pair {
            pair: pair.into(),
            inputs,
        }
    }

    fn span(span: &str, inputs: usize) -> Quote {
        Quote::Span {
            span: span.into(),
            inputs,
        }
    }

    #[test]
    fn a_rule_quoting_one_input_is_caught_with_its_count() {
        let child = format!(
            "{SEED}\nRules:\n- When the input includes the words \"camden market\", answer sadness."
        );
        assert_eq!(rows().quoted(&child), Some(pair("camden market", 1)));
    }

    #[test]
    fn a_pair_is_two_words_of_one_line_not_a_heading_and_the_rule_below_it() {
        // One input holds "rules when": the heading `Rules:` above a rule that begins "When" is
        // the prompt's layout, and the rule passes; the same words inside a rule are a quote.
        let inputs = InputPairs::new(SEED, ["Officials changed the rules when the war began"]);
        let child = format!("{SEED}\nRules:\n- When the writer mourns, answer sadness.");
        assert_eq!(inputs.quoted(&child), None);
        let child = format!("{SEED}\nRules:\n- Answer sadness: rules when war.");
        assert_eq!(inputs.quoted(&child), Some(pair("rules when", 1)));
        // Nor does a stop word at the start of a line make a phrase with the line above.
        let inputs = InputPairs::new(SEED, ["A tribute to Ferrand"]);
        let child = format!("{SEED}\nRules:\n- Answer ferrand\nto keep it short.");
        assert_eq!(
            inputs.quoted_phrase(&child),
            None,
            "`ferrand to` spans two lines"
        );
    }

    #[test]
    fn general_words_and_common_pairs_pass() {
        let rules = [
            "- When the writer describes a loss or a disappointment, answer sadness.",
            // In four inputs: common, not a quote.
            "- Answer joy: so happy today.",
            // Seed and stop words only: "the answer" occurs in no input, "the job" would.
            "- Give only the answer.",
        ];
        for rule in rules {
            let child = format!("{SEED}\nRules:\n{rule}");
            assert_eq!(rows().quoted(&child), None, "{rule}");
        }
        // Pairs of seed and stop words never count, even when an input holds them.
        let inputs = InputPairs::new("give the answer", ["give the answer now"]);
        assert_eq!(inputs.quoted("Always give the answer."), None);
        // A pair with one word outside the seed does.
        assert_eq!(inputs.quoted("Answer now."), Some(pair("answer now", 1)));
    }

    #[test]
    fn a_list_of_quoted_words_from_inputs_is_caught() {
        let child =
            format!("{SEED}\nRules:\n- When the text contains \"Hey\", \"camden\", answer joy.");
        // "hey" is in no input; "camden" is in one.
        assert_eq!(rows().quoted(&child), Some(span("camden", 1)));
        // Curly quotes too; a quote of a common phrase (four inputs) is not tied to a few.
        let curly = format!("{SEED}\n- When it says \u{201c}picnic\u{201d}, answer sadness.");
        assert_eq!(rows().quoted(&curly), Some(span("picnic", 1)));
        let common = format!("{SEED}\n- When it says \"so happy\", answer joy.");
        assert_eq!(rows().quoted(&common), None);
        // Single quotes too, but not an apostrophe inside a word.
        let single = format!("{SEED}\n- When it has words like 'picnic', 'job', answer joy.");
        assert_eq!(rows().quoted(&single), Some(span("picnic", 1)));
        assert_eq!(
            single_quoted("don't say 'so happy' or 'x y', it's 'fine'."),
            ["so happy", "x y", "fine"]
        );
        // The seed's own quotes are not the child's.
        let inputs = InputPairs::new("Reply with \"name\" and {text}.", ["my name is Ana"]);
        assert_eq!(inputs.quoted("Reply with \"name\" and {text}."), None);
        assert_eq!(
            inputs.quoted("Reply with \"name\" and {text}. Skip \"Ana\"."),
            Some(span("ana", 1))
        );
    }

    #[test]
    fn a_stop_word_beside_a_word_of_the_inputs_is_a_phrase_of_them() {
        // The inputs use "snooze" and "reminder", never "snooze a": a rule that says "snooze
        // a" may still quote the rows the engine has not seen (after CLINC-150, round 7, where
        // the word was "set", which is now common English and passes).
        let inputs = InputPairs::new(
            SEED,
            [
                "snooze reminder for noon",
                "reminder then snooze alarm",
                "please snooze timer",
                "so happy today",
                "so happy today",
                "so happy today",
                "so happy today",
            ],
        );
        let rule = format!("{SEED}\nRules:\n- When asked to snooze a reminder, answer joy.");
        assert_eq!(
            inputs.quoted(&rule),
            Some(Quote::Phrase {
                pair: "to snooze".into(),
                word: "snooze".into(),
                word_inputs: 3,
                inputs: 0,
            })
        );
        let failure = ProposalFailure::from(inputs.quoted(&rule).unwrap());
        assert_eq!(failure.label(), "quotes_phrase");
        assert!(
            failure
                .to_string()
                .contains("\"to snooze\", a stop word beside \"snooze\" (a word of 3 of")
        );
        // Not a phrase: a stop word beside a word no input has, or beside a word of the seed;
        // beside a common English word; two words that are not stop words; a pair in more than
        // RARE_INPUTS inputs.
        for rule in [
            "- When asked to set a reminder, answer joy.",
            "- When the writer plans a trip, answer joy.",
            "- Answer with the joy label.",
            "- When asked to remember deadlines, answer joy.",
            "- When reminders say happy things, answer joy.",
        ] {
            assert_eq!(inputs.quoted(&format!("{SEED}\n{rule}")), None, "{rule}");
        }
        let common = InputPairs::new(SEED, ["is so happy"; 4]);
        assert_eq!(common.quoted("When it is so happy, answer joy."), None);
        // The engine's own wording is not a phrase of the inputs: in round 8 "is about" of the
        // glossary's heading refused every subject of a CLINC glossary ("about" is common
        // English now; a heading with a rare word of the inputs shows the same rule).
        let about = InputPairs::new(SEED, ["tell me tungsten facts", "tungsten is due"]);
        let heading = "What each answer is of tungsten:";
        let glossary = format!("{heading}\n- joy: metals\n\n{SEED}");
        assert!(matches!(
            about.quoted(&glossary),
            Some(Quote::Phrase { .. })
        ));
        let about = about.with_own_wording(&[heading]);
        assert_eq!(about.quoted(&glossary), None);
        assert!(
            about
                .quoted("- When it is of tungsten, answer joy.")
                .is_some()
        );
    }

    #[test]
    fn a_stop_word_beside_a_word_many_inputs_use_is_general_english() {
        // "technology" in four inputs: "technology or" says what the task is about.
        let mut inputs = vec!["new technology stocks rise"; 4];
        inputs.push("tungsten prices fall");
        let inputs = InputPairs::new(SEED, inputs);
        let rule = format!("{SEED}\n- When the text is about technology or science, answer joy.");
        assert_eq!(inputs.quoted(&rule), None);
        // "tungsten" is in one input: "tungsten or" is still how that one input may put it.
        let rule = format!("{SEED}\n- When the text is about tungsten or gas, answer joy.");
        assert!(matches!(inputs.quoted(&rule), Some(Quote::Phrase { .. })));
    }

    #[test]
    fn the_engines_own_heading_is_no_quote_though_an_input_holds_its_words() {
        // The AG News row that held "is about" among the rows the engine saw.
        let inputs = InputPairs::new(
            SEED,
            [
                "a fox that is about the size of a house cat is back",
                "stocks rise on oil news",
            ],
        )
        .with_own_wording(&crate::reflection::OWN_WORDING);
        let heading = crate::reflection::GLOSSARY_HEADING;
        assert!(heading.contains("is about"), "{heading}");
        let glossary = format!("{heading}\n- joy: science, nature\n\n{SEED}");
        assert_eq!(inputs.quoted(&glossary), None);
        // The same words written by the model are its words, and quote that row.
        let rule = format!("{SEED}\n- When the text is about the size, answer joy.");
        assert_eq!(
            inputs.quoted(&rule),
            Some(Quote::Pair {
                pair: "is about".into(),
                inputs: 1
            })
        );
    }

    #[test]
    fn a_long_word_of_a_single_input_is_a_quote_and_a_short_or_shared_one_is_not() {
        let inputs = InputPairs::new(
            SEED,
            [
                "what is phenylalanine",
                "define vertigo",
                "what causes vertigo",
                "why is the sky blue",
            ],
        );
        let glossary = format!("What each answer is about:\n- joy: phenylalanine\n\n{SEED}");
        let inputs = inputs.with_own_wording(&["What each answer is about:"]);
        assert_eq!(
            inputs.quoted(&glossary),
            Some(Quote::Word {
                word: "phenylalanine".into()
            })
        );
        let failure = ProposalFailure::from(inputs.quoted(&glossary).unwrap());
        assert_eq!(failure.label(), "quotes_inputs");
        // In two inputs, or shorter than five letters, or in none: not tied to one row.
        for subject in ["vertigo", "sky", "chemistry"] {
            let glossary = format!("What each answer is about:\n- joy: {subject}\n\n{SEED}");
            assert_eq!(inputs.quoted(&glossary), None, "{subject}");
        }
    }

    #[test]
    fn a_common_english_word_of_one_input_is_not_a_quote_alone_nor_beside_a_stop_word() {
        // A news sample where the engine met "technology" and "automakers" once each.
        let inputs = InputPairs::new(
            SEED,
            [
                "new technology stocks rise",
                "automakers sue state over emissions",
                "rain ruined the final match",
            ],
        );
        for rule in [
            "- When discussing technology or innovation, answer joy.",
            "- When the news is about a technology company, answer joy.",
        ] {
            assert_eq!(inputs.quoted(&format!("{SEED}\n{rule}")), None, "{rule}");
        }
        // A word of one input that is not common English is still its quote, alone or beside
        // a stop word; and a pair of one input is, whatever its words.
        assert_eq!(
            inputs.quoted(&format!("{SEED}\n- joy: automakers")),
            Some(Quote::Word {
                word: "automakers".into()
            })
        );
        assert!(matches!(
            inputs.quoted(&format!("{SEED}\n- When the automakers act, answer joy.")),
            Some(Quote::Phrase { .. })
        ));
        assert!(matches!(
            inputs.quoted(&format!(
                "{SEED}\n- When technology stocks move, answer joy."
            )),
            Some(Quote::Pair { .. })
        ));
        assert!(common_english("technology") && !common_english("automakers"));
    }

    #[test]
    fn words_follow_the_shared_measure() {
        // The measure's pattern is [a-z0-9@#']+ on the lowercased text.
        assert_eq!(
            words("Don't @Bob #Tag x-y é"),
            ["don't", "@bob", "#tag", "x", "y"]
        );
    }
}
