//! Whether a failed host request means the API server did not answer (the
//! connection, TLS, a timeout, a 5xx) rather than answered "no" (a 4xx). Waiting
//! is the only remedy for the first; the second is a verdict on the request.

/// `true` when `err` is not an answer from the API server about the request.
pub(crate) fn did_not_answer(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code >= 500,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("refused", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn server_errors_and_transport_failures_are_no_answer_refusals_are() {
        for code in [500, 502, 503, 504] {
            assert!(did_not_answer(&status(code)), "{code}");
        }
        for code in [400, 403, 404, 409, 422, 429] {
            assert!(!did_not_answer(&status(code)), "{code}");
        }
        assert!(did_not_answer(&kube::Error::Service(
            "connection refused".into()
        )));
    }
}
