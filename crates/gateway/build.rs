//! Gives the build its commit (`SUNDIAL_BUILD_COMMIT`, shown by `/version`,
//! `sundial --version` and `sundial_build_info`): the variable's value when
//! the build sets it (an image built without `.git`), else `git`'s
//! abbreviated HEAD, else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=SUNDIAL_BUILD_COMMIT");
    let commit = std::env::var("SUNDIAL_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let head = git(&["rev-parse", "--short=12", "HEAD"])?;
            // Built again when HEAD moves (a commit, a checkout): the files
            // that say where it is, those that exist (a missing one would
            // run this script on every build).
            if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
                let mut watched = vec![format!("{dir}/HEAD"), format!("{dir}/packed-refs")];
                if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
                    watched.push(format!("{dir}/{reference}"));
                }
                for path in watched {
                    if std::path::Path::new(&path).exists() {
                        println!("cargo:rerun-if-changed={path}");
                    }
                }
            }
            Some(head)
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SUNDIAL_BUILD_COMMIT={commit}");
}
