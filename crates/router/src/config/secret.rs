//! A password in the config: written as a string, or read from a file or
//! an environment variable, so that the config file itself can be shared
//! (a Kubernetes ConfigMap) while the password stays in a Secret.
//!
//! ```toml
//! password = "s3cret"                        # in the file
//! password = { file = "/run/secrets/redis" } # the file's content, trimmed
//! password = { env = "REDIS_PASSWORD" }      # the variable's value
//! ```
//!
//! A file or a variable is read each time the shard connects (at start,
//! and when a reload changes the shard's config), as the TLS files are.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A password, or where to read it. Its `Debug` shows where, never the
/// value.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
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
        match self {
            Self::Value(v) => Ok(v.clone()),
            Self::File { file } => std::fs::read_to_string(file)
                .map(|s| s.trim_end_matches(['\r', '\n']).to_owned())
                .map_err(|e| format!("cannot read the password file {}: {e}", file.display())),
            Self::Env { env } => std::env::var(env)
                .map_err(|_| format!("the environment variable {env} (a password) is not set")),
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
}
