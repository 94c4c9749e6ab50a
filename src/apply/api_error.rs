//! API errors as people read them: the API server's own message and the fields it names,
//! bounded, instead of a debug dump of the whole `Status` (which can repeat a user value
//! several times and grow past what a status write or a log line can hold).

use crate::engine::diagnostic::{MESSAGE_LIMIT, bounded};

/// What went wrong in a request, for conditions, Events and logs: for an API error its
/// message (which names the object) and, when `details.causes` names fields the message does
/// not, those fields; for anything else the error's own text. At most [`MESSAGE_LIMIT`] bytes.
pub(crate) fn describe(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => describe_status(status),
        other => bounded(&other.to_string(), MESSAGE_LIMIT).into_owned(),
    }
}

/// The message of an API server `Status`, with the fields its causes name.
pub(crate) fn describe_status(status: &kube::core::Status) -> String {
    let mut text = if status.message.is_empty() {
        format!("{} (HTTP {})", status.reason, status.code)
    } else {
        status.message.clone()
    };
    let mut fields: Vec<&str> = status
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .map(|c| c.field.as_str())
        .filter(|f| !f.is_empty() && !status.message.contains(*f))
        .collect();
    fields.dedup();
    if !fields.is_empty() {
        text.push_str(&format!(" (field {})", fields.join(", ")));
    }
    bounded(&text, MESSAGE_LIMIT).into_owned()
}

/// A 422 `Invalid` API error with `message` and one cause per field, for tests of the writers
/// that read such errors.
#[cfg(test)]
pub(crate) fn rejected(message: &str, fields: &[&str]) -> kube::Error {
    use kube::core::response::{StatusCause, StatusDetails};
    kube::Error::Api(Box::new(kube::core::Status {
        code: 422,
        reason: "Invalid".to_owned(),
        message: message.to_owned(),
        details: Some(StatusDetails {
            name: "x".to_owned(),
            group: String::new(),
            kind: "services".to_owned(),
            uid: String::new(),
            retry_after_seconds: 0,
            causes: fields
                .iter()
                .map(|f| StatusCause {
                    reason: "FieldValueInvalid".to_owned(),
                    message: "bad".to_owned(),
                    field: (*f).to_owned(),
                })
                .collect(),
        }),
        ..kube::core::Status::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_error_reads_as_its_message_not_a_debug_dump() {
        let err = rejected(
            "Service \"x\" is invalid: spec.ports[0].name: Invalid value: \"A_B\"",
            &["spec.ports[0].name"],
        );
        assert_eq!(
            describe(&err),
            "Service \"x\" is invalid: spec.ports[0].name: Invalid value: \"A_B\""
        );
    }

    #[test]
    fn fields_the_message_does_not_name_are_added() {
        let err = rejected("the object is invalid", &["metadata.name", "metadata.name"]);
        assert_eq!(describe(&err), "the object is invalid (field metadata.name)");
    }

    #[test]
    fn a_message_repeating_a_huge_value_is_bounded() {
        let huge = "x".repeat(900_000);
        let err = rejected(&format!("{huge}: {huge}"), &[]);
        let text = describe(&err);
        assert!(text.len() < MESSAGE_LIMIT + 64, "{}", text.len());
        assert!(text.ends_with("(1800002 bytes in all)"), "{}", &text[text.len() - 40..]);
    }
}
