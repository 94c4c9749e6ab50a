//! JUnit XML for CI systems: one `<testsuite>` per RuleTest document, one `<testcase>` per case.

use super::Report;

/// The report as JUnit XML.
pub(crate) fn xml(report: &Report) -> String {
    let mut suites: Vec<(&str, Vec<&super::CaseResult>)> = Vec::new();
    for case in &report.cases {
        match suites.iter_mut().find(|(name, _)| *name == case.suite) {
            Some((_, cases)) => cases.push(case),
            None => suites.push((&case.suite, vec![case])),
        }
    }
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"ruleop test\" tests=\"{}\" failures=\"{}\">\n",
        report.cases.len(),
        report.failed()
    ));
    for (name, cases) in suites {
        let failures = cases.iter().filter(|c| !c.passed()).count();
        let time: f64 = cases.iter().map(|c| c.seconds).sum();
        out.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" time=\"{time:.3}\">\n",
            escape(name),
            cases.len()
        ));
        for case in cases {
            let file = case.file.display().to_string();
            out.push_str(&format!(
                "    <testcase classname=\"{}\" name=\"{}\" file=\"{}\" line=\"{}\" time=\"{:.3}\"",
                escape(&file),
                escape(&case.name),
                escape(&file),
                case.line,
                case.seconds
            ));
            if case.passed() {
                out.push_str("/>\n");
                continue;
            }
            let first = case.failures.first().map(String::as_str).unwrap_or_default();
            out.push_str(&format!(
                ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                escape(first.lines().next().unwrap_or_default()),
                escape(&format!("{file}:{}\n{}", case.line, case.failures.join("\n")))
            ));
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 cannot carry other control characters, even escaped.
            c if c.is_control() && !matches!(c, '\n' | '\t' | '\r') => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_control_characters_are_escaped() {
        assert_eq!(escape("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot;\u{fffd}");
    }
}
