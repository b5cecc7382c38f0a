//! Label and field selectors in the apiserver's string syntax.

use serde_json::Value;

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelRequirement {
    /// `key=value` or `key==value`.
    Equals(String, String),
    /// `key!=value` (also true when the label is absent).
    NotEquals(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)` (also true when the label is absent).
    NotIn(String, Vec<String>),
    /// `key`: the label exists.
    Exists(String),
    /// `!key`: the label does not exist.
    DoesNotExist(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<LabelRequirement>);

fn split_top_level(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth = depth.saturating_sub(1);
                cur.push(c);
            }
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    parts.push(cur);
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised set, found {rest:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            if let Some(key) = part.strip_prefix('!') {
                reqs.push(LabelRequirement::DoesNotExist(key.trim().to_string()));
            } else if let Some((k, v)) = part.split_once("!=") {
                reqs.push(LabelRequirement::NotEquals(
                    k.trim().into(),
                    v.trim().into(),
                ));
            } else if let Some((k, v)) = part.split_once("==") {
                reqs.push(LabelRequirement::Equals(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = part.split_once('=') {
                reqs.push(LabelRequirement::Equals(k.trim().into(), v.trim().into()));
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                reqs.push(LabelRequirement::NotIn(k.trim().into(), parse_set(rest)?));
            } else if let Some((k, rest)) = part.split_once(" in ") {
                reqs.push(LabelRequirement::In(k.trim().into(), parse_set(rest)?));
            } else if part.contains([' ', '(', ')']) {
                return Err(format!("unable to parse requirement: {part:?}"));
            } else {
                reqs.push(LabelRequirement::Exists(part));
            }
        }
        Ok(Self(reqs))
    }

    /// Whether the object's `metadata.labels` satisfy the selector.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelRequirement::Equals(k, v) => get(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::Exists(k) => get(k).is_some(),
            LabelRequirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `path=value` / `path==value` / `path!=value` terms on dotted paths
/// such as `metadata.name`, `metadata.namespace`, `status.phase`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=foo,metadata.namespace!=bar`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for part in split_top_level(s) {
            let (path, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid field selector term: {part:?}"));
            };
            terms.push((path.trim().to_string(), eq, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    /// Whether the object satisfies the selector (missing fields compare as `""`).
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, value)| {
            let mut cur = Some(obj);
            for seg in path.split('.') {
                cur = cur.and_then(|c| c.get(seg));
            }
            let actual = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_operators() {
        let obj = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&obj);
        assert!(m("a=1"));
        assert!(m("a==1,b=2"));
        assert!(!m("a=2"));
        assert!(m("a!=2"));
        assert!(m("c!=2"));
        assert!(m("a in (1, 3)"));
        assert!(!m("a notin (1,3)"));
        assert!(m("c notin (1)"));
        assert!(m("a,b"));
        assert!(m("!c"));
        assert!(!m("!a"));
        assert!(m(""));
        assert!(LabelSelector::parse("a in 1").is_err());
    }

    #[test]
    fn field_selector() {
        let obj = json!({"metadata": {"name": "x", "namespace": "ns"}});
        assert!(
            FieldSelector::parse("metadata.name=x")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=x")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("metadata.namespace==ns,metadata.name=x")
                .unwrap()
                .matches(&obj)
        );
    }
}
