//! Checks of the admin listener's access settings at config load: the
//! names it answers to (`admin_hosts`) and the basic-auth `accounts`.

use std::collections::BTreeMap;

/// The shortest admin password accepted.
const MIN_PASSWORD_CHARS: usize = 12;

/// Passwords that example configs, tutorials and default installs use:
/// refused whatever their length (compared without case).
const KNOWN_DEFAULTS: &[&str] = &[
    "change-me",
    "changeme",
    "change-me-please",
    "changemeplease",
    "password",
    "password1234",
    "passw0rd",
    "secret",
    "s3cret",
    "admin",
    "administrator",
    "sundial",
    "lmstfy",
    "123456789012",
    "qwertyuiopas",
    "letmeinletmein",
];

/// `accounts` with those of `file` added: a TOML file of `user =
/// "password"` lines (say, a Kubernetes Secret mounted as a file), so that
/// passwords need not sit in the config. A user in both is refused, as is
/// a file that cannot be read; errors never quote the file's text.
pub(super) fn with_accounts_file(
    mut accounts: BTreeMap<String, String>,
    file: Option<&std::path::Path>,
) -> anyhow::Result<BTreeMap<String, String>> {
    let Some(file) = file else {
        return Ok(accounts);
    };
    use figment::{
        Figment,
        providers::{Format, Toml},
    };
    // Read first, so that a missing or unreadable file is an error (a
    // figment provider would take it for an empty one).
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("accounts_file {}: {e}", file.display()))?;
    // The parser's own message may quote the text: not shown.
    let table: BTreeMap<String, String> =
        Figment::from(Toml::string(&text)).extract().map_err(|_| {
            anyhow::anyhow!(
                "accounts_file {}: not TOML `user = \"password\"` lines",
                file.display()
            )
        })?;
    for (user, password) in table {
        anyhow::ensure!(
            !accounts.contains_key(&user),
            "accounts: {user:?} is both in [accounts] and in accounts_file {}",
            file.display()
        );
        accounts.insert(user, password);
    }
    Ok(accounts)
}

/// A config that could not be read, said without the secrets it may hold:
/// an `accounts` value is never shown, nor any string value that has the
/// wrong type (a shard URL with its password, say), nor the lines of the
/// file that a TOML syntax error quotes.
pub(super) fn redacted(errors: figment::Error) -> anyhow::Error {
    use figment::error::{Actual, Kind};
    let said: Vec<String> = errors
        .into_iter()
        .map(|mut e| {
            if e.path
                .first()
                .is_some_and(|k| k.eq_ignore_ascii_case("accounts"))
            {
                return "accounts: each must be user = \"password\", the password a string \
                        (the value is not shown)"
                    .to_owned();
            }
            if let Kind::InvalidType(Actual::Str(_), expected) = &e.kind {
                e.kind = Kind::InvalidType(Actual::Other("a string".to_owned()), expected.clone());
            }
            e.to_string()
                .lines()
                .filter(|l| {
                    !l.trim_start()
                        .trim_start_matches(|c: char| c.is_ascii_digit())
                        .trim_start()
                        .starts_with('|')
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    anyhow::anyhow!("invalid configuration: {}", said.join("; "))
}

/// `admin_hosts` are bare host names, which a `Host` header can match.
pub(super) fn check_admin_hosts(names: &[String]) -> anyhow::Result<()> {
    for name in names {
        let label_ok =
            |l: &str| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        anyhow::ensure!(
            name.len() <= 253 && name.split('.').all(label_ok),
            "admin_hosts: {name:?} is not a host name (letters, digits, `-` and dots; \
             no scheme, port or path)"
        );
    }
    Ok(())
}

/// Every account has a user name basic auth can carry and a password that
/// is not empty, short, the user's name or a known default. The error
/// names the user, never the password.
pub(super) fn check_accounts(accounts: &BTreeMap<String, String>) -> anyhow::Result<()> {
    for (user, password) in accounts {
        anyhow::ensure!(
            !user.is_empty() && !user.contains(':') && !user.chars().any(char::is_control),
            "accounts: {user:?} cannot be a user name (empty, or holds `:` or a control character)"
        );
        let weak = if password.chars().count() < MIN_PASSWORD_CHARS {
            format!("shorter than {MIN_PASSWORD_CHARS} characters")
        } else if password.eq_ignore_ascii_case(user) {
            "the user's name".to_owned()
        } else if KNOWN_DEFAULTS
            .iter()
            .any(|d| d.eq_ignore_ascii_case(password))
        {
            "a well-known default".to_owned()
        } else {
            continue;
        };
        anyhow::bail!(
            "accounts: the password of {user:?} is {weak}: the admin API mints tokens and \
             reads every tenant's jobs; set a long random one (say, `openssl rand -base64 18`)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accounts(user: &str, password: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(user.to_owned(), password.to_owned())])
    }

    #[test]
    fn weak_admin_passwords_are_refused_by_their_user_and_never_shown() {
        check_accounts(&accounts("ops", "k3P9-vQ2x-7ZmL")).expect("a strong one");
        check_accounts(&BTreeMap::new()).expect("no accounts");
        for (user, password, why) in [
            ("ops", "", "shorter than 12"),
            ("ops", "s3cret", "shorter than 12"),
            ("ops", "elevenchars", "shorter than 12"),
            ("operator-one", "Operator-One", "the user's name"),
            ("ops", "Password1234", "well-known default"),
            ("ops", "change-me-please", "well-known default"),
        ] {
            let e = check_accounts(&accounts(user, password))
                .expect_err(password)
                .to_string();
            assert!(e.contains(&format!("{user:?}")) && e.contains(why), "{e}");
            assert!(password.is_empty() || !e.contains(password), "{e}");
        }
        for user in ["", "a:b"] {
            let e = check_accounts(&accounts(user, "k3P9-vQ2x-7ZmL")).expect_err(user);
            assert!(e.to_string().contains("cannot be a user name"), "{e}");
        }
    }

    #[test]
    fn accounts_come_from_a_file_too_and_a_user_in_both_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("accounts.toml");
        std::fs::write(
            &file,
            "ops = \"k3P9-vQ2x-7ZmL\"\nci = \"Zq8-wT5-pL2-nR7\"\n",
        )
        .expect("write");
        let both =
            with_accounts_file(accounts("admin", "u7Y-kd9-Qw2-x1"), Some(&file)).expect("merged");
        assert_eq!(both.len(), 3);
        assert_eq!(both["ci"], "Zq8-wT5-pL2-nR7");
        let e =
            with_accounts_file(accounts("ops", "u7Y-kd9-Qw2-x1"), Some(&file)).expect_err("twice");
        assert!(e.to_string().contains("\"ops\" is both"), "{e}");
        std::fs::write(&file, "ops = k3P9-vQ2x-7ZmL\n").expect("write");
        let e = with_accounts_file(BTreeMap::new(), Some(&file)).expect_err("not TOML");
        assert!(!e.to_string().contains("k3P9"), "{e}");
        let e = with_accounts_file(BTreeMap::new(), Some(&dir.path().join("none")))
            .expect_err("missing");
        assert!(e.to_string().starts_with("accounts_file "), "{e}");
        assert_eq!(
            with_accounts_file(BTreeMap::new(), None)
                .expect("none")
                .len(),
            0
        );
    }

    #[test]
    fn a_config_that_cannot_be_read_shows_no_password() {
        use figment::{
            Figment,
            providers::{Format, Toml},
        };
        #[derive(Debug, serde::Deserialize)]
        struct Cfg {
            #[allow(dead_code)]
            accounts: BTreeMap<String, String>,
            #[allow(dead_code)]
            url: u32,
        }
        for text in [
            "url = 1\n[accounts]\nops = 987654321098765\n",
            "accounts = \"{ops=Sup3r-S3cret-Pa55\"\nurl = 1\n",
            "url = \"redis://:Sup3r-S3cret-Pa55@h\"\n[accounts]\n",
            "url = 1\n[accounts]\nops = Sup3r-S3cret-Pa55x\n",
        ] {
            let e = Figment::from(Toml::string(text))
                .extract::<Cfg>()
                .expect_err(text);
            let said = redacted(e).to_string();
            assert!(
                !said.contains("Sup3r") && !said.contains("987654321098765"),
                "{said}"
            );
            assert!(said.starts_with("invalid configuration: "), "{said}");
        }
    }

    #[test]
    fn admin_hosts_are_bare_host_names() {
        check_admin_hosts(&["sundial-admin.ops.svc".to_owned(), "gw1".to_owned()]).expect("names");
        for bad in [
            "http://admin.internal",
            "admin.internal:7778",
            "",
            "a..b",
            "admin/x",
        ] {
            let e = check_admin_hosts(&[bad.to_owned()]).expect_err(bad);
            assert!(e.to_string().starts_with("admin_hosts: "), "{bad}: {e}");
        }
    }
}
