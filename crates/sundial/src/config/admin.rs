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
