//! The one loopback HTTPS test server, for the attack suite and the HTTP
//! client's own tests (`http_client`): a self-signed certificate for
//! `127.0.0.1` and `localhost` made at test time (rcgen), TLS by
//! tokio-rustls, and a tiny HTTP/1.1 responder, one request per connection
//! but for `/keep-alive` (a request body is read by its `Content-Length`).
//!
//! Routes:
//!
//! | path | answer |
//! |---|---|
//! | `/ok` | `200` with header `X-Served-By: test`, body `hello` |
//! | `/echo` | `200`, body `<METHOD> <request body length> <X-Test header>` |
//! | `/big` | `200` announcing (and sending) one byte more than the 10 MiB body cap |
//! | `/big-stream` | `200` without a length, streaming past the body cap |
//! | `/slow` | `200` announcing 50 bytes, one every 100 ms (5 s in all) |
//! | `/redirect-http` | `302` to `http://127.0.0.1:PORT/ok` |
//! | `/redirect-other` | `302` to `https://localhost:PORT/ok` |
//! | `/redirect-ok` | `302` to `/ok` |
//! | `/redirect-post` | `303` to `/echo` |
//! | `/redirect-loop` | `302` to itself |
//! | `/echo-head` | `200` with header `X-Echo-Authorization: <the request's>`, body the request's head (request line and headers) |
//! | `/keep-alive` | `200`, body `kept`, and the connection stays open for the next request (the only route that keeps it) |
//! | `/files/NAME` | `200`, the bytes of `NAME` in the folder set by [`TestServer::serve_dir`] (one path segment, no `..`); `404` when there is none |
//! | anything else | `404`, body `no route <path>` (so a test sees the path that arrived) |
//!
//! The host trusts the certificate through the policy key
//! `extra_root_certificates` (see [`TestServer::write_ca`]); a bare
//! [`HttpClient`] through `HttpConfig::extra_roots` (see [`TestServer::client`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use zotbox::capability::http::{HttpClient, HttpConfig};

/// The host's default response body cap (`capability::http::DEFAULT_MAX_BODY`).
pub const BODY_CAP: u64 = zotbox::capability::http::DEFAULT_MAX_BODY;

/// A running server; it lives as long as the test's runtime.
#[derive(Debug)]
pub struct TestServer {
    /// The port on 127.0.0.1.
    pub port: u16,
    /// The self-signed certificate, PEM.
    pub ca_pem: String,
    /// The head (request line and headers) of every request, in order:
    /// what really arrived, for tests of what the host put in.
    pub heads: Arc<std::sync::Mutex<Vec<String>>>,
    /// The folder `/files/NAME` serves from, once set.
    files: Arc<std::sync::Mutex<Option<PathBuf>>>,
    /// Connections accepted and not yet closed.
    open: Arc<std::sync::atomic::AtomicUsize>,
}

/// Counts a connection as open from its accept until it is dropped.
struct OpenConnection(Arc<std::sync::atomic::AtomicUsize>);

impl OpenConnection {
    fn new(open: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(open.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl TestServer {
    /// Starts a server on a free port of 127.0.0.1.
    pub async fn start() -> Self {
        let rcgen::CertifiedKey { cert, key_pair } = rcgen::generate_simple_self_signed(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ])
        .expect("self-signed certificate");
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rustls::pki_types::PrivatePkcs8KeyDer::from(key_pair.serialize_der()),
        );
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .expect("server certificate");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("local address").port();
        let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = heads.clone();
        let files = Arc::new(std::sync::Mutex::new(None));
        let served = files.clone();
        let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = open.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let recorded = recorded.clone();
                let served = served.clone();
                let connection = OpenConnection::new(&counted);
                tokio::spawn(async move {
                    let _connection = connection;
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        // A client that hangs up early (a refused redirect, a
                        // body over the cap) is the point of some routes.
                        while let Ok(true) = respond(&mut tls, port, &recorded, &served).await {}
                    }
                });
            }
        });
        Self {
            port,
            ca_pem: cert.pem(),
            heads,
            files,
            open,
        }
    }

    /// Connections a client holds open to the server now.
    pub fn open_connections(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `https://127.0.0.1:PORT`, the origin to grant.
    pub fn origin(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// `https://127.0.0.1:PORT<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin())
    }

    /// `https://localhost:PORT<path>`: the same server by a name.
    pub fn localhost(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    /// The heads of the requests that arrived so far.
    pub fn received(&self) -> Vec<String> {
        self.heads
            .lock()
            .map(|heads| heads.clone())
            .unwrap_or_default()
    }

    /// A client that trusts the server's certificate, with these caps.
    pub fn client(&self, max_body: u64, timeout: Duration) -> HttpClient {
        HttpClient::new(HttpConfig {
            max_body,
            timeout,
            extra_roots: vec![self.ca_pem.clone().into_bytes()],
        })
        .expect("a client trusting the test server")
    }

    /// Serves the files of `dir` at `/files/NAME`.
    pub fn serve_dir(&self, dir: &Path) {
        if let Ok(mut files) = self.files.lock() {
            *files = Some(dir.to_owned());
        }
    }

    /// Writes the certificate to `dir/test-ca.pem` and returns its path.
    pub fn write_ca(&self, dir: &Path) -> PathBuf {
        let path = dir.join("test-ca.pem");
        std::fs::write(&path, &self.ca_pem).expect("write the test CA");
        path
    }
}

/// `text` with each `%XX` decoded (bytes read as UTF-8, lossily).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `text` with the hex digits of each `%XX` in lowercase.
fn lowercase_hex(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut hex_left = 0;
    for c in text.chars() {
        if hex_left > 0 {
            out.push(c.to_ascii_lowercase());
            hex_left -= 1;
        } else {
            if c == '%' {
                hex_left = 2;
            }
            out.push(c);
        }
    }
    out
}

/// Reads one request (its head, then a body of `Content-Length` bytes) and
/// answers it by path; `true` when the connection stays open for another.
async fn respond<S>(
    stream: &mut S,
    port: u16,
    heads: &std::sync::Mutex<Vec<String>>,
    files: &std::sync::Mutex<Option<PathBuf>>,
) -> std::io::Result<bool>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut request = Vec::new();
    let mut buffer = [0u8; 4096];
    let head_end = loop {
        let read = stream.read(&mut buffer).await?;
        if read == 0 {
            return Ok(false);
        }
        request.extend_from_slice(&buffer[..read]);
        if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
    };
    let head = String::from_utf8_lossy(&request[..head_end]).into_owned();
    if let Ok(mut heads) = heads.lock() {
        heads.push(head.clone());
    }
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or("").to_owned();
    let path = words.next().unwrap_or("").to_owned();
    let header = |name: &str| {
        head.lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(key, _)| key.trim().eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim().to_owned())
    };
    let length: usize = header("content-length")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    while request.len() < head_end.saturating_add(length) {
        let read = stream.read(&mut buffer).await?;
        if read == 0 {
            break;
        }
        request.extend_from_slice(&buffer[..read]);
    }
    let simple = |status: &str, extra: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let redirect = |location: String| simple("302 Found", &format!("Location: {location}\r\n"), "");
    let chunk = vec![b'x'; 64 * 1024];
    match path.as_str() {
        "/ok" => {
            let reply = simple("200 OK", "X-Served-By: test\r\n", "hello");
            stream.write_all(reply.as_bytes()).await?;
        }
        "/keep-alive" => {
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nkept")
                .await?;
            stream.flush().await?;
            return Ok(true);
        }
        "/echo" => {
            let body = format!(
                "{method} {} {}",
                request.len() - head_end,
                header("x-test").unwrap_or_default()
            );
            stream
                .write_all(simple("200 OK", "", &body).as_bytes())
                .await?;
        }
        _ if path.starts_with("/files/") => {
            let name = &path["/files/".len()..];
            let folder = files.lock().ok().and_then(|files| files.clone());
            let bytes = folder
                .filter(|_| !name.is_empty() && !name.contains('/') && name != "..")
                .and_then(|folder| std::fs::read(folder.join(name)).ok());
            match bytes {
                Some(bytes) => {
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        bytes.len()
                    );
                    stream.write_all(head.as_bytes()).await?;
                    stream.write_all(&bytes).await?;
                }
                None => {
                    let reply = simple("404 Not Found", "", &format!("no file {name}"));
                    stream.write_all(reply.as_bytes()).await?;
                }
            }
        }
        _ if path.starts_with("/echo-head") => {
            let extra = format!(
                "X-Echo-Authorization: {}\r\n",
                header("authorization").unwrap_or_default()
            );
            stream
                .write_all(simple("200 OK", &extra, head.trim_end()).as_bytes())
                .await?;
        }
        "/big" => {
            let length = BODY_CAP + 1;
            let head =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n");
            stream.write_all(head.as_bytes()).await?;
            let mut sent = 0u64;
            while sent < length {
                let part = usize::try_from((length - sent).min(chunk.len() as u64)).unwrap_or(0);
                stream.write_all(&chunk[..part]).await?;
                sent += part as u64;
            }
        }
        "/big-stream" => {
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                .await?;
            for _ in 0..=(BODY_CAP / chunk.len() as u64) {
                stream.write_all(&chunk).await?;
            }
        }
        "/slow" => {
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\nConnection: close\r\n\r\n")
                .await?;
            for _ in 0..50 {
                stream.write_all(b"x").await?;
                stream.flush().await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        "/redirect-http" => {
            let reply = redirect(format!("http://127.0.0.1:{port}/ok"));
            stream.write_all(reply.as_bytes()).await?;
        }
        _ if path == "/redirect-other" || path.starts_with("/redirect-other?") => {
            let reply = redirect(format!("https://localhost:{port}/ok"));
            stream.write_all(reply.as_bytes()).await?;
        }
        // The request head, gzip-compressed whatever was asked.
        _ if path.starts_with("/gzip-anyway") => {
            use std::io::Write as _;
            let mut gzip =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gzip.write_all(head.as_bytes())?;
            let body = gzip.finish()?;
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(reply.as_bytes()).await?;
            stream.write_all(&body).await?;
        }
        // The bearer token as a header's name, and the query's `key` as
        // writers echo it: JSON with `/` escaped, and lowercase `%xx`.
        _ if path.starts_with("/echo-forms") => {
            let token = header("authorization")
                .and_then(|value| value.strip_prefix("Bearer ").map(str::to_owned))
                .unwrap_or_else(|| "none".to_owned());
            let key = path
                .split_once("key=")
                .map(|(_, key)| key.split('&').next().unwrap_or_default().to_owned())
                .unwrap_or_default();
            let body = format!(
                "json:{} lower:{}",
                percent_decoded(&key).replace('/', "\\/"),
                lowercase_hex(&key)
            );
            let reply = simple("200 OK", &format!("X-Echo-{token}: x\r\n"), &body);
            stream.write_all(reply.as_bytes()).await?;
        }
        "/redirect-ok" => {
            stream
                .write_all(redirect("/ok".to_owned()).as_bytes())
                .await?
        }
        "/redirect-post" => {
            let reply = simple("303 See Other", "Location: /echo\r\n", "");
            stream.write_all(reply.as_bytes()).await?;
        }
        "/redirect-loop" => {
            stream
                .write_all(redirect("/redirect-loop".to_owned()).as_bytes())
                .await?;
        }
        other => {
            let reply = simple("404 Not Found", "", &format!("no route {other}"));
            stream.write_all(reply.as_bytes()).await?;
        }
    }
    stream.flush().await?;
    stream.shutdown().await?;
    Ok(false)
}
