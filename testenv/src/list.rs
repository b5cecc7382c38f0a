//! The `list` verb with kube-apiserver's paging, `limit` and `continue`, by the rules of the
//! Kubernetes API ("Retrieving large results sets in chunks") and of kube-apiserver's etcd
//! storage (`k8s.io/apiserver/pkg/storage`, `continue.go`, `etcd3/store.go` `GetList`): items in
//! key order (namespace, then name); `metadata.continue` while more follow, and
//! `metadata.remainingItemCount` (not with selectors); every page of one list shows the snapshot
//! of its first page. The token is the apiserver's own encoding (base64url of
//! `{"v":"meta.k8s.io/v1","rv":…,"start":"<key>\u0000"}`; a negative `rv` continues on the latest
//! state, as for its "inconsistent" tokens), so a client cannot tell the two apart. A bad token,
//! or `continue` with `resourceVersion`, is `400`; a token older than the watch history is `410
//! Expired` (without the apiserver's inconsistent token to go on with).
//!
//! Not modelled: kube-apiserver may answer a `resourceVersion="0"` list from its watch cache
//! without paging; testenv pages every list that sets `limit`.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    http::{Params, to_meta},
    resource::ResourceInfo,
    selector::{FieldSelector, LabelSelector},
    server::{Shared, lock},
    status::ApiError,
    store::{Compacted, ObjKey},
};

/// The apiserver's continue token (`k8s.io/apiserver/pkg/storage` `continueToken`).
#[derive(Serialize, Deserialize)]
struct ContinueToken {
    #[serde(rename = "v")]
    api_version: String,
    #[serde(rename = "rv")]
    resource_version: i64,
    #[serde(rename = "start")]
    start_key: String,
}

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// The apiserver's message for a continue token older than etcd's compaction.
const EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

fn encode_token(info: &ResourceInfo, rv: u64, key: &ObjKey) -> String {
    let start = if info.namespaced {
        format!("{}/{}\0", key.0, key.1)
    } else {
        format!("{}\0", key.1)
    };
    let token = ContinueToken {
        api_version: TOKEN_VERSION.to_string(),
        resource_version: i64::try_from(rv).unwrap_or(i64::MAX),
        start_key: start,
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&token).expect("token serialises"))
}

/// The key after which to go on, and the resourceVersion to list at (`None`: the latest).
fn decode_token(info: &ResourceInfo, token: &str) -> Result<(ObjKey, Option<u64>), ApiError> {
    let invalid = |why: String| ApiError::bad_request(format!("continue key is not valid: {why}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|e| invalid(e.to_string()))?;
    let token: ContinueToken =
        serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
    if token.api_version != TOKEN_VERSION {
        return Err(invalid(format!(
            "got encoded version {}",
            token.api_version
        )));
    }
    let rv = match token.resource_version {
        0 => {
            return Err(invalid(
                "incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into(),
            ));
        }
        rv if rv < 0 => None,
        rv => Some(rv as u64),
    };
    let Some(start) = token.start_key.strip_suffix('\0') else {
        return Err(invalid("encoded start key is not a key successor".into()));
    };
    let key = if info.namespaced {
        let Some((ns, name)) = start.split_once('/') else {
            return Err(invalid("encoded start key has no namespace".into()));
        };
        (ns.to_string(), name.to_string())
    } else {
        (String::new(), start.to_string())
    };
    Ok((key, rv))
}

/// Serves a list request: selectors, `limit`/`continue`, and `PartialObjectMetadataList` when
/// `meta`.
pub(crate) fn list(
    shared: &Shared,
    res: usize,
    info: &ResourceInfo,
    ns: Option<&str>,
    params: &Params,
    meta: bool,
) -> Result<Value, ApiError> {
    let labels = LabelSelector::parse(params.get("labelSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(params.get("fieldSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let selected = params.get("labelSelector").is_some() || params.get("fieldSelector").is_some();
    let limit = match params.get("limit") {
        None => 0,
        Some(s) => s
            .parse::<i64>()
            .map_err(|e| ApiError::bad_request(format!("limit: {e}")))?
            .max(0),
    };
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let cont = match params.get("continue") {
        None => None,
        Some(_) if params.get("resourceVersion").is_some() => {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        Some(token) => Some(decode_token(info, token)?),
    };
    let (page, rv) = {
        let st = lock(&shared.store);
        let rv = cont.as_ref().and_then(|(_, rv)| *rv).unwrap_or(st.rv);
        let after = cont.as_ref().map(|(key, _)| key);
        let page = st
            .list_page(res, ns, rv, after, limit, |o| {
                labels.matches(o) && fields.matches(o)
            })
            .map_err(|Compacted| ApiError::new(410, "Expired", EXPIRED))?;
        (page, rv)
    };
    let items: Vec<Value> = page
        .items
        .into_iter()
        .map(|o| if meta { to_meta(&o) } else { o })
        .collect();
    let (kind, api_version) = if meta {
        (
            "PartialObjectMetadataList".to_string(),
            "meta.k8s.io/v1".to_string(),
        )
    } else {
        (info.list_kind.clone(), info.api_version())
    };
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(key) = &page.next {
        metadata["continue"] = json!(encode_token(info, rv, key));
        if !selected {
            metadata["remainingItemCount"] = json!(page.remaining);
        }
    }
    Ok(json!({
        "kind": kind,
        "apiVersion": api_version,
        "metadata": metadata,
        "items": items,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(namespaced: bool) -> ResourceInfo {
        crate::resource::default_resources()
            .into_iter()
            .find(|r| r.namespaced == namespaced)
            .expect("a resource")
    }

    #[test]
    fn tokens_round_trip() {
        let ns = info(true);
        let key = ("kcp-system".to_string(), "rt-1".to_string());
        let token = encode_token(&ns, 42, &key);
        assert_eq!(decode_token(&ns, &token).unwrap(), (key, Some(42)));
        let cluster = info(false);
        let key = (String::new(), "n1".to_string());
        let token = encode_token(&cluster, 7, &key);
        assert_eq!(decode_token(&cluster, &token).unwrap(), (key, Some(7)));
    }

    #[test]
    fn bad_tokens_are_bad_requests() {
        let ns = info(true);
        let enc = |v: Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string().as_bytes())
        };
        for token in [
            "%%%".to_string(),
            enc(json!({"nope": 1})),
            enc(json!({"v": "other/v1", "rv": 3, "start": "a/b\u{0}"})),
            enc(json!({"v": TOKEN_VERSION, "rv": 0, "start": "a/b\u{0}"})),
            enc(json!({"v": TOKEN_VERSION, "rv": 3, "start": "a/b"})),
            enc(json!({"v": TOKEN_VERSION, "rv": 3, "start": "ab\u{0}"})),
        ] {
            let e = decode_token(&ns, &token).unwrap_err();
            assert_eq!(e.code, 400, "{token}");
        }
        // A negative resourceVersion goes on with the latest state.
        let token = enc(json!({"v": TOKEN_VERSION, "rv": -1, "start": "a/b\u{0}"}));
        assert_eq!(
            decode_token(&ns, &token).unwrap(),
            (("a".to_string(), "b".to_string()), None)
        );
    }
}
