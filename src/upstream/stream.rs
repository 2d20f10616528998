//! The socket of an in-task upstream connection: plain TCP for an `http`
//! origin, TLS over TCP for an `https` one; and the TLS handshake that
//! makes the latter.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::dial::url_host;
use super::error::{ErrorKind, UpstreamError};
use crate::http::origin::Origin;

/// An upstream connection's byte stream. The TLS state (over a kilobyte)
/// is boxed: plain connections stay small.
pub(super) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The protocol a TLS origin chose by ALPN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Protocol {
    /// `http/1.1`, or no ALPN answer.
    Http1,
    H2,
}

impl Stream {
    /// The protocol the origin chose (HTTP/1.1 for plain TCP).
    pub(super) fn protocol(&self) -> Protocol {
        match self {
            Stream::Tls(tls) if tls.get_ref().1.alpn_protocol() == Some(b"h2") => Protocol::H2,
            _ => Protocol::Http1,
        }
    }

    /// True if no byte has arrived on an idle connection (an origin's
    /// close, a TLS close_notify, bytes no request asked for). TLS data
    /// rustls already holds, decrypted or not, counts as arrived. Asks the
    /// socket only when the event loop has seen it become readable; a byte
    /// read from it here leaves the connection unusable, which it is
    /// anyway.
    pub(super) fn still_open(&mut self) -> bool {
        let tcp = match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => {
                let (tcp, session) = tls.get_mut();
                match session.process_new_packets() {
                    Ok(state)
                        if state.plaintext_bytes_to_read() == 0
                            && !state.peer_has_closed()
                            && !session.wants_write() => {}
                    _ => return false,
                }
                tcp
            }
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match tcp.poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => {
                let mut probe = [0u8; 1];
                matches!(tcp.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }

    /// The TCP socket under it.
    #[cfg(test)]
    pub(super) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => tls.get_ref().0,
        }
    }

    /// Sends what TLS holds back (plain TCP holds nothing).
    pub(super) async fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(_) => Ok(()),
            Stream::Tls(tls) => tokio::io::AsyncWriteExt::flush(&mut **tls).await,
        }
    }
}

/// The TLS handshake with `origin` over `tcp`, with the name the origin's
/// host gives (an IP literal as an address). Fails as the pooled client
/// does: its error reads the same in a 502 body.
pub(super) async fn handshake(
    tcp: TcpStream,
    origin: &Origin,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<Stream, UpstreamError> {
    let host = url_host(origin);
    let name = ServerName::try_from(origin.host())
        .map_err(|e| {
            let e = io::Error::new(io::ErrorKind::InvalidInput, e);
            UpstreamError::classified(e, &host, ErrorKind::Connect)
        })?
        .to_owned();
    match TlsConnector::from(tls.clone()).connect(name, tcp).await {
        Ok(stream) => Ok(Stream::Tls(Box::new(stream))),
        // A certificate problem shows as a rustls error, classified as TLS;
        // anything else failed the connection, as the pooled client's
        // connector reports it.
        Err(e) => Err(UpstreamError::classified(e, &host, ErrorKind::Connect)),
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}
