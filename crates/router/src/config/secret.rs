//! A password in the config: written as a string, or read from a file or
//! an environment variable, so that the config file itself can be shared
//! (a Kubernetes ConfigMap) while the password stays in a Secret.
//!
//! ```toml
//! password = "s3cret"                        # in the file
//! password = { file = "/run/secrets/redis" } # the file's content, without its final line break
//! password = { env = "REDIS_PASSWORD" }      # the variable's value
//! ```
//!
//! A file or a variable is read whenever the config is checked (at start,
//! at every reload, by `check-config`) and when the shard connects, as the
//! TLS files are. An empty password is refused: Redis would take it for
//! none, and connect as its `default` user.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A password, or where to read it. Its `Debug` shows where, never the
/// value.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    untagged,
    deny_unknown_fields,
    expecting = "a password: a string, { file = \"…\" } or { env = \"…\" } (a password in a \
                 SUNDIAL_* variable that reads as a number or a boolean must be quoted: \
                 SUNDIAL_ADMIN_REDIS_PASSWORD='\"12345678\"')"
)]
pub enum Secret {
    /// Written in the config.
    Value(String),
    /// The content of a file, without its trailing newline.
    File { file: PathBuf },
    /// The value of an environment variable.
    Env { env: String },
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Value(_) => f.write_str("Secret(..)"),
            Self::File { file } => write!(f, "Secret(file {})", file.display()),
            Self::Env { env } => write!(f, "Secret(env {env})"),
        }
    }
}

impl Secret {
    /// The password. The error names the file or variable, not a value.
    pub fn read(&self) -> Result<String, String> {
        let (value, what) = match self {
            Self::Value(v) => (v.clone(), "a password in the config".to_owned()),
            Self::File { file } => (
                std::fs::read_to_string(file)
                    .map(|s| s.trim_end_matches(['\r', '\n']).to_owned())
                    .map_err(|e| {
                        format!("cannot read the password file {}: {e}", file.display())
                    })?,
                format!("the password file {}", file.display()),
            ),
            Self::Env { env } => (
                std::env::var(env).map_err(|_| {
                    format!("the environment variable {env} (a password) is not set")
                })?,
                format!("the environment variable {env} (a password)"),
            ),
        };
        if value.is_empty() {
            return Err(format!(
                "{what} is empty: Redis would take it for no password (leave `password` out \
                 for none)"
            ));
        }
        Ok(value)
    }

    /// The environment variable it is read from, if any.
    pub fn env(&self) -> Option<&str> {
        match self {
            Self::Env { env } => Some(env),
            _ => None,
        }
    }
}

impl From<&str> for Secret {
    fn from(v: &str) -> Self {
        Self::Value(v.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct T {
        password: Secret,
    }

    fn parse(text: &str) -> Result<Secret, String> {
        serde_json::from_str::<T>(text)
            .map(|t| t.password)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_secret_is_a_string_a_file_or_a_variable_and_never_shown() {
        let path = std::env::temp_dir().join(format!("sundial-secret-{}", std::process::id()));
        std::fs::write(&path, "from-a-file\n").expect("write");
        let file =
            parse(&serde_json::json!({"password": {"file": path}}).to_string()).expect("file");
        assert_eq!(file.read().as_deref(), Ok("from-a-file"));
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            parse(r#"{"password": "s"}"#)
                .expect("value")
                .read()
                .as_deref(),
            Ok("s")
        );
        let e = parse(r#"{"password": {"env": "SUNDIAL_TEST_UNSET_PASSWORD_VAR"}}"#)
            .expect("env")
            .read()
            .expect_err("unset");
        assert!(e.contains("SUNDIAL_TEST_UNSET_PASSWORD_VAR"), "{e}");
        let e = parse(r#"{"password": {"file": "/nonexistent/pw"}}"#)
            .expect("file")
            .read()
            .expect_err("missing");
        assert!(e.contains("/nonexistent/pw"), "{e}");
        assert!(
            parse(r#"{"password": {"path": "x"}}"#).is_err(),
            "unknown form"
        );
        assert_eq!(format!("{:?}", Secret::from("hunter2")), "Secret(..)");
    }

    #[test]
    fn an_empty_password_is_refused_wherever_it_comes_from() {
        let path = std::env::temp_dir().join(format!("sundial-empty-{}", std::process::id()));
        std::fs::write(&path, "\n").expect("write");
        let e = Secret::File { file: path.clone() }
            .read()
            .expect_err("empty file");
        assert!(
            e.contains(&path.display().to_string()) && e.contains("empty"),
            "{e}"
        );
        let _ = std::fs::remove_file(&path);
        let e = Secret::from("").read().expect_err("empty value");
        assert!(e.contains("empty"), "{e}");
        let e = parse(r#"{"password": 12345678}"#).expect_err("a number");
        assert!(e.contains("must be quoted"), "{e}");
    }
}
