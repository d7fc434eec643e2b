use super::*;

/// A token client no Bedrock request uses.
struct NoTokens;

#[async_trait]
impl TokenClient for NoTokens {
    async fn post_form(
        &self,
        _url: &str,
        _form: &str,
    ) -> Result<super::super::TokenAnswer, AuthError> {
        Err(AuthError::new("not used"))
    }
}

fn raw(edit: impl FnOnce(&mut RawChannel)) -> RawChannel {
    let mut c = RawChannel {
        name: "bedrock".into(),
        protocol: "bedrock".into(),
        base_url: "https://bedrock-runtime.us-east-1.amazonaws.com".into(),
        models: vec!["claude".into()],
        region: Some("us-east-1".into()),
        access_key: "AKIDEXAMPLE".into(),
        secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
        ..RawChannel::default()
    };
    edit(&mut c);
    c
}

fn refused(c: RawChannel) -> String {
    match Bedrock::from_raw(&c) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.field,
    }
}

#[test]
fn options_are_checked_with_their_field() {
    assert_eq!(refused(raw(|c| c.region = None)), "region");
    assert_eq!(
        refused(raw(|c| c.region = Some("US East".into()))),
        "region"
    );
    assert_eq!(refused(raw(|c| c.secret_key.clear())), "secret_key");
    assert_eq!(refused(raw(|c| c.access_key.clear())), "access_key");
    assert_eq!(refused(raw(|c| c.api_key = "k".into())), "api_key");
    assert_eq!(refused(raw(|c| c.api_keys = vec!["k".into()])), "api_keys");
    assert_eq!(refused(raw(|c| c.project = Some("p".into()))), "project");
    let neither = |c: &mut RawChannel| {
        c.access_key.clear();
        c.secret_key.clear();
    };
    assert_eq!(refused(raw(neither)), "access_key");
    assert_eq!(
        refused(raw(|c| {
            neither(c);
            c.session_token = "t".into();
        })),
        "session_token"
    );
    assert!(Bedrock::from_raw(&raw(|c| {
        neither(c);
        c.api_key = "bedrock-api-key".into();
    }))
    .is_ok());
}

#[test]
fn a_channel_of_the_protocol_is_a_bedrock_cloud() {
    let ch = crate::channels::Channel::from_raw(raw(|_| {}), &Default::default()).unwrap();
    assert!(ch.cloud.is_some());
    assert!(ch.signer.is_none());
    assert_eq!(
        ch.upstream_protocol(Protocol::Chat, "m"),
        Protocol::Converse
    );
    let e = crate::channels::Channel::from_raw(raw(|c| c.region = None), &Default::default())
        .unwrap_err();
    assert_eq!(e.field, "region");
}

#[test]
fn the_target_is_the_models_converse_path() {
    let b = Bedrock::from_raw(&raw(|_| {})).unwrap();
    let mut t = Target {
        path: "/whatever".into(),
        body: bytes::Bytes::new(),
        wire: Some(Protocol::Converse),
        model: "us.anthropic.claude-3-5-sonnet-20241022-v2:0".into(),
        stream: true,
    };
    b.target(&mut t).unwrap();
    assert_eq!(
        t.path,
        "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse-stream"
    );
    t.stream = false;
    t.model = "arn:aws:bedrock:us-east-1:1:inference-profile/x".into();
    b.target(&mut t).unwrap();
    assert_eq!(
        t.path,
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx/converse"
    );
    t.wire = None;
    assert!(b.target(&mut t).is_err());
}

fn header<'a>(h: &'a [(&'static str, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
}

/// The signatures botocore's `SigV4Auth` computes for the same request (2024-01-01,
/// AWS's documentation example key pair).
#[tokio::test]
async fn signatures_match_an_independent_signer() {
    let req = Outbound {
        key: "",
        method: "POST",
        path: "/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse",
        host: "bedrock-runtime.us-east-1.amazonaws.com",
        content_type: Some("application/json"),
        body: br#"{"messages":[]}"#,
    };
    let now = 1_704_067_200;
    let b = Bedrock::from_raw(&raw(|_| {})).unwrap();
    let h = b.authenticate(&NoTokens, &req, now).await.unwrap();
    assert_eq!(header(&h, "x-amz-date"), Some("20240101T000000Z"));
    assert_eq!(
        header(&h, "x-amz-content-sha256"),
        Some("5e4ce7b36ba37b78a5d5f9fd08e6b7b54ba6879d651aa46ec9e1d6fa24ebe30a")
    );
    assert_eq!(header(&h, "accept"), Some("application/json"));
    assert_eq!(
        header(&h, "authorization"),
        Some(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240101/us-east-1/bedrock/aws4_request, \
              SignedHeaders=host;x-amz-content-sha256;x-amz-date, \
              Signature=54f13c00adfb64ff626a173c626a2c9052c9939e6fb0a8a09284088e608d3ed2"
        )
    );

    let b = Bedrock::from_raw(&raw(|c| c.session_token = "SESSIONTOKEN".into())).unwrap();
    let h = b.authenticate(&NoTokens, &req, now).await.unwrap();
    assert_eq!(header(&h, "x-amz-security-token"), Some("SESSIONTOKEN"));
    assert!(header(&h, "authorization").unwrap().ends_with(
        "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token, \
         Signature=9c737b44b77d17091651a9d187e4f49ae838d4fbfbf6cd6043518aa0f273f213"
    ));
    assert_eq!(b.auth_state()["kind"], "sigv4");
    assert!(!b.auth_state().to_string().contains("SESSIONTOKEN"));
}

#[tokio::test]
async fn an_api_key_is_a_bearer_token_and_streams_ask_for_event_streams() {
    let b = Bedrock::from_raw(&raw(|c| {
        c.access_key.clear();
        c.secret_key.clear();
        c.api_key = "ABSK-key".into();
    }))
    .unwrap();
    let req = Outbound {
        key: "",
        method: "POST",
        path: "/model/m/converse-stream",
        host: "h",
        content_type: Some("application/json"),
        body: b"{}",
    };
    let h = b.authenticate(&NoTokens, &req, 0).await.unwrap();
    assert_eq!(header(&h, "authorization"), Some("Bearer ABSK-key"));
    assert_eq!(
        header(&h, "accept"),
        Some("application/vnd.amazon.eventstream")
    );
    assert!(!b.auth_state().to_string().contains("ABSK"));
}
