//! Request checks: defaults, every refusal with the parameter it names, the error body.

use rdu_serve::api::{
    check_length, check_model, generation, prompt_ids, ApiError, ChatRequest, CompletionRequest, Params,
};

fn completion(body: &str) -> Result<CompletionRequest, ApiError> {
    CompletionRequest::parse(body.as_bytes())
}

#[test]
fn defaults_are_openai_s() {
    let req = completion(r#"{"prompt": [1, 2]}"#).expect("parse");
    let g = generation(&req.params, Some(16), 99).expect("check");
    assert_eq!(g.max_tokens, Some(16));
    assert_eq!((g.sampling.temperature, g.sampling.top_p, g.sampling.top_k, g.sampling.seed), (1.0, 1.0, 0, 99));
    assert!(!g.stream && g.stop.is_empty() && !g.return_token_ids);
    let chat =
        ChatRequest::parse(br#"{"messages": [], "max_completion_tokens": 5, "top_k": -1, "seed": 3, "stop": "x"}"#)
            .expect("parse");
    let g = generation(&chat.params, None, 99).expect("check");
    assert_eq!((g.max_tokens, g.sampling.top_k, g.sampling.seed, g.stop), (Some(5), 0, 3, vec!["x".to_string()]));
}

#[test]
fn every_refusal_names_its_parameter() {
    let refused = |body: &str| -> ApiError {
        match completion(body) {
            Err(e) => e,
            Ok(req) => generation(&req.params, Some(16), 0).expect_err(body),
        }
    };
    for (body, param) in [
        (r#"{"prompt": [1], "temperature": -0.5}"#, Some("temperature")),
        (r#"{"prompt": [1], "temperature": "warm"}"#, Some("temperature")),
        (r#"{"prompt": [1], "top_p": 1.5}"#, Some("top_p")),
        (r#"{"prompt": [1], "top_k": -2}"#, Some("top_k")),
        (r#"{"prompt": [1], "n": 3}"#, Some("n")),
        (r#"{"prompt": [1], "max_tokens": -1}"#, Some("max_tokens")),
        (r#"{"prompt": [1], "stop": ["a", "b", "c", "d", "e"]}"#, Some("stop")),
        (r#"{"prompt": [1], "stop": [""]}"#, Some("stop")),
        (r#"{"prompt": [1], "stream_options": {"include_usage": 3}}"#, Some("stream_options.include_usage")),
        (r#"{"max_tokens": 3}"#, Some("prompt")),
        (r#"[1, 2]"#, None),
        (r#"{"prompt": [1"#, None),
    ] {
        let e = refused(body);
        assert_eq!((e.status, e.param.as_deref()), (400, param), "{body}: {e:?}");
        assert_eq!(e.body()["error"]["type"], "invalid_request_error");
    }
}

#[test]
fn prompts_models_and_lengths() {
    let req = completion(r#"{"prompt": [1, 300]}"#).expect("parse");
    assert!(prompt_ids(&req.prompt, 256, None).expect_err("out of range").message.contains("300"));
    let req = completion(r#"{"prompt": "text"}"#).expect("parse");
    assert!(prompt_ids(&req.prompt, 256, None).expect_err("no tokenizer").message.contains("token ids"));
    let req = completion(r#"{"prompt": [3, 4]}"#).expect("parse");
    assert_eq!(prompt_ids(&req.prompt, 256, None).expect("ids"), vec![3, 4]);
    let e = check_length(9, 8).expect_err("too long");
    assert_eq!((e.status, e.code), (400, Some("context_length_exceeded")));
    assert!(check_length(8, 8).is_ok());
    let p = Params { model: Some("other".into()), ..Params::default() };
    let e = check_model(&p, "tiny").expect_err("unknown model");
    assert_eq!(
        (e.status, e.code, e.body()["error"]["type"].as_str()),
        (404, Some("model_not_found"), Some("not_found_error"))
    );
    assert!(check_model(&Params::default(), "tiny").is_ok());
    let busy = ApiError::busy(429, "full");
    assert_eq!((busy.retry_after, busy.kind), (Some(1), "rate_limit_error"));
}
