//! Certificates for TLS tests, made by `openssl` (a throwaway CA, valid
//! two days, in a temporary directory removed on drop): `ca.pem`, and
//! `server.pem` / `server.key` (for 127.0.0.1 and localhost) and
//! `client.pem` / `client.key` (client authentication) that it signed.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .unwrap()
        .port()
}

/// A CA, and a server and a client certificate it signed.
pub struct Certs {
    dir: PathBuf,
}

impl Certs {
    pub fn make() -> Certs {
        let dir = std::env::temp_dir().join(format!(
            "rategate-tls-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("openssl must be installed (apt-get install openssl)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=rategate test CA",
        ]);
        run(&ca);
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for who in ["server", "client"] {
            let key = format!("{who}.key");
            let csr = format!("{who}.csr");
            let pem = format!("{who}.pem");
            let ext = format!("{who}.ext");
            let mut req = vec!["req"];
            req.extend(ec);
            req.extend(["-keyout", &key, "-out", &csr, "-subj", "/CN=127.0.0.1"]);
            run(&req);
            run(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &ext,
            ]);
        }
        Certs { dir }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(name)).unwrap()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
