//! TLS to a shard with the operator's own CA and a client certificate:
//! a Redis that trusts only clients signed by a test CA
//! (`tls-auth-clients yes`), certificates made by `openssl`, and the real
//! gateway talking to it over `rediss://`.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use redis::Commands;
use sundial_tests::{
    Api, RedisServer, Sundial, SundialConfig, create_token, free_port, wait_until,
};

/// A CA, a server certificate for 127.0.0.1 and a client certificate, all
/// signed by the CA; and a second CA that signed nothing of these.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn make() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("run openssl (tests/run installs it)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        for ca in ["ca", "other-ca"] {
            let subject = format!("/CN=sundial test {ca}");
            let (key, pem) = (format!("{ca}.key"), format!("{ca}.pem"));
            let mut args = vec!["req", "-x509", "-nodes", "-days", "2"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &pem, "-subj", &subject]);
            run(&args);
        }
        std::fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=IP:127.0.0.1\n",
        )
        .expect("write ext");
        std::fs::write(
            dir.path().join("client.ext"),
            "extendedKeyUsage=clientAuth\n",
        )
        .expect("write ext");
        for (leaf, cn) in [("server", "127.0.0.1"), ("client", "sundial")] {
            let (key, csr, pem) = (
                format!("{leaf}.key"),
                format!("{leaf}.csr"),
                format!("{leaf}.pem"),
            );
            let subject = format!("/CN={cn}");
            let mut args = vec!["req", "-nodes"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
            run(&args);
            let mut args = vec![
                "x509", "-req", "-in", &csr, "-CA", "ca.pem", "-CAkey", "ca.key",
            ];
            args.extend(["-CAcreateserial", "-days", "2", "-out", &pem]);
            let ext = format!("{leaf}.ext");
            args.extend(["-extfile", &ext]);
            run(&args);
        }
        Self { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// A Redis with its usual plain port (for the test's own client) and a
    /// TLS port that asks every client for a certificate signed by `ca.pem`.
    fn redis(&self) -> (RedisServer, u16) {
        let tls_port = free_port().to_string();
        let p = |f: &str| self.path(f).display().to_string();
        let (cert, key, ca) = (p("server.pem"), p("server.key"), p("ca.pem"));
        let redis = RedisServer::start_with(&[
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "yes",
        ]);
        (redis, tls_port.parse().expect("port"))
    }
}

/// A config whose default pool is the TLS port, with this `tls` table.
fn config(url: &str, tls: &str) -> SundialConfig {
    let mut cfg = SundialConfig::new(url);
    cfg.pools = Some(format!(
        "[pools.default]\nshards = [{{ url = \"{url}\", tls = {{ {tls} }} }}]\n"
    ));
    cfg
}

fn files(certs: &Certs, ca: &str, client: bool) -> String {
    let mut t = format!("ca_file = \"{}\"", certs.path(ca).display());
    if client {
        t += &format!(
            ", cert_file = \"{}\", key_file = \"{}\"",
            certs.path("client.pem").display(),
            certs.path("client.key").display()
        );
    }
    t
}

/// `sundial check-config` on a file holding only the default pool at
/// `url` with this `tls` table: (accepted, what it printed).
fn check_config(url: &str, tls: &str) -> (bool, String) {
    sundial_tests::check_config(&config(url, tls).pools.expect("pools"))
}

#[tokio::test]
async fn a_shard_is_reached_over_tls_with_a_ca_file_and_a_client_certificate() {
    let certs = Certs::make();
    let (redis, tls_port) = certs.redis();
    let url = format!("rediss://127.0.0.1:{tls_port}");

    let gw = Sundial::start(&config(&url, &files(&certs, "ca.pem", true)));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    let id = api.publish("ns", "q", "", b"over tls").await;
    let got = api.get("/api/ns/q?timeout=1").await;
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(got.json["job_id"], id.as_str());
    assert_eq!(api.delete(&format!("/api/ns/q/job/{id}")).await.status, 204);

    // What went over TLS is in this Redis: the token table and the queue's
    // counters, read on the plain port by an independent client.
    let mut c = redis.client();
    let tokens: usize = c.hlen("sd:tokens").expect("hlen");
    assert_eq!(tokens, 1);
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut c)
        .expect("client list");
    assert!(
        clients.lines().count() > 1,
        "the gateway's connections: {clients}"
    );
}

#[tokio::test]
async fn a_shard_that_refuses_the_handshake_keeps_the_gateway_unready_and_its_log_says_why() {
    let certs = Certs::make();
    let (_redis, tls_port) = certs.redis();
    let url = format!("rediss://127.0.0.1:{tls_port}");

    // No client certificate: the server ends every handshake, and the
    // gateway does not become ready; its log says why. A CA that did not
    // sign the server: the same, for the gateway's own reason.
    for (ca, client, why) in [
        ("ca.pem", false, "CertificateRequired"),
        ("other-ca.pem", true, "UnknownIssuer"),
    ] {
        let mut gw = Sundial::spawn(&config(&url, &files(&certs, ca, client)));
        wait_until(Duration::from_secs(15), why, || gw.log().contains(why));
        let ready = reqwest::get(format!("{}/ready", gw.admin())).await;
        assert!(
            ready.map_or(true, |r| r.status() != 200),
            "ready although the handshake fails ({why}):\n{}",
            gw.log()
        );
        assert!(gw.log().contains("default/main"), "{}", gw.log());
        gw.kill();
    }

    // The right files: ready.
    let gw = Sundial::start(&config(&url, &files(&certs, "ca.pem", true)));
    let token = create_token(&gw.admin(), "ns").await;
    let api = Api::new(gw.api(), Some(&token));
    api.publish("ns", "q", "", b"x").await;
}

#[test]
fn tls_files_that_cannot_work_are_refused_before_connecting() {
    let certs = Certs::make();
    let ca = certs.path("ca.pem");
    let ca = ca.display();
    let cases = [
        // Files for a connection without TLS.
        (
            "redis://127.0.0.1:1",
            format!("ca_file = \"{ca}\""),
            "needs a TLS connection",
        ),
        // A certificate without its key.
        (
            "rediss://127.0.0.1:1",
            format!(
                "ca_file = \"{ca}\", cert_file = \"{}\"",
                certs.path("client.pem").display()
            ),
            "give both or neither",
        ),
        // A file that is not there.
        (
            "rediss://127.0.0.1:1",
            format!(
                "ca_file = \"{}\"",
                Path::new("/nonexistent/ca.pem").display()
            ),
            "/nonexistent/ca.pem",
        ),
        // A key file given as the CA: no certificate in it.
        (
            "rediss://127.0.0.1:1",
            format!("ca_file = \"{}\"", certs.path("ca.key").display()),
            "holds no PEM certificate",
        ),
        // A key that is not the certificate's.
        (
            "rediss://127.0.0.1:1",
            format!(
                "ca_file = \"{ca}\", cert_file = \"{}\", key_file = \"{}\"",
                certs.path("client.pem").display(),
                certs.path("server.key").display()
            ),
            "is not the key of cert_file",
        ),
    ];
    for (url, tls, why) in cases {
        let (ok, out) = check_config(url, &tls);
        assert!(!ok, "{url} {tls}: accepted");
        assert!(out.contains(why), "{url} {tls}: {out}");
    }
    // Every TLS form of a URL takes the files: standalone and cluster.
    for url in [
        "rediss://127.0.0.1:1",
        "rediss-cluster://127.0.0.1:1?node=127.0.0.1:2",
    ] {
        let (ok, out) = check_config(
            url,
            &format!(
                "ca_file = \"{ca}\", cert_file = \"{}\", key_file = \"{}\"",
                certs.path("client.pem").display(),
                certs.path("client.key").display()
            ),
        );
        assert!(ok, "{url}: {out}");
    }
}
