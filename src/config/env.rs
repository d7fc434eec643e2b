//! `${VAR}` expansion inside YAML string scalars. Expanding the parsed tree (not the raw
//! text) means a secret containing `:` or `#` cannot change the document's structure.
//!
//! `${file:/path}` is the content of a file (its trailing newline removed): a secret
//! mounted as a file can change under a running process, so a reload picks up a rotated
//! key, which an environment variable (fixed at start) cannot offer.

use super::{config_err, ConfigError};
use serde_yaml::Value;

pub fn expand(
    v: &mut Value,
    path: &mut String,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    match v {
        Value::String(s) if s.contains("${") => {
            *s = expand_str(s, lookup).map_err(|m| config_err(path.clone(), m))?;
        }
        Value::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                expand(item, path, lookup)?;
                path.truncate(len);
            }
        }
        Value::Mapping(map) => {
            for (k, item) in map.iter_mut() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k.as_str().unwrap_or("?"));
                expand(item, path, lookup)?;
                path.truncate(len);
            }
        }
        Value::Tagged(t) => expand(&mut t.value, path, lookup)?,
        _ => {}
    }
    Ok(())
}

fn expand_str(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "unterminated `${` in value".to_string())?;
        let expr = &after[..end];
        if let Some(file) = expr.strip_prefix("file:") {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read the secret file {file}: {e}"))?;
            out.push_str(text.trim_end_matches(['\n', '\r']));
            rest = &after[end + 1..];
            continue;
        }
        let (name, default) = match expr.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (expr, None),
        };
        let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("`${{{expr}}}` is not a valid variable name"));
        }
        match (lookup(name), default) {
            (Some(val), _) => out.push_str(&val),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(format!("environment variable {name} is not set"));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(n: &str) -> Option<String> {
        (n == "A").then(|| "x: #y".to_string())
    }

    #[test]
    fn expands_and_defaults() {
        assert_eq!(
            expand_str("pre-${A}-post", &look).unwrap(),
            "pre-x: #y-post"
        );
        assert_eq!(expand_str("${B:-dflt}", &look).unwrap(), "dflt");
        assert!(expand_str("${B}", &look)
            .unwrap_err()
            .contains("B is not set"));
        assert!(expand_str("${A", &look).is_err());
        let dir = std::env::temp_dir().join(format!("mg-env-{}", std::process::id()));
        std::fs::write(&dir, "s3cret\n").unwrap();
        let got = expand_str(&format!("k-${{file:{}}}", dir.display()), &look).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(got, "k-s3cret");
        assert!(expand_str("${file:/surely/not/here}", &look)
            .unwrap_err()
            .contains("/surely/not/here"));
        assert!(expand_str("${A B}", &look).is_err());
    }
}
