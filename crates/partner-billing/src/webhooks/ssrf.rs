//! The one rule for where webhooks may go, used at registration and at every delivery.
//!
//! A URL must be `https://` to a public address. The host is resolved and **every** resolved
//! address checked; the delivery then connects to exactly those checked addresses (so a DNS
//! answer that changes between check and connect cannot swap them). Private, shared (CGNAT),
//! link-local (cloud metadata at 169.254.169.254 included), unique-local, multicast, reserved
//! and unspecified addresses are always refused. `--webhook-allow-insecure` (development and
//! tests) additionally allows `http://` and loopback addresses, nothing else (docs/webhooks.md).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use url::Url;

/// Why a webhook URL is refused. Never quotes the URL (it may hold credentials).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefused {
    #[error("must be an absolute http(s) URL with a host")]
    Malformed,
    #[error("must use https://")]
    Scheme,
    #[error("must not carry a user name or password")]
    Credentials,
    #[error("the host could not be resolved")]
    Unresolvable,
    #[error("the host resolves to a private, loopback, link-local or otherwise non-public address")]
    NonPublicAddress,
}

/// A URL that passed the rule, with the addresses to connect to.
#[derive(Debug, Clone)]
pub struct CheckedUrl {
    pub url: Url,
    /// The host as written in the URL (for TLS and the `Host` header).
    pub host: String,
    /// Every address the host resolved to; each one allowed.
    pub addresses: Vec<SocketAddr>,
}

/// Parses `url`, resolves its host, and checks the scheme and every address.
pub async fn check_url(url: &str, allow_insecure: bool) -> Result<CheckedUrl, UrlRefused> {
    // The parser would drop or escape a control character and accept the rest; the text kept
    // is the one sent, so a URL with one is refused whole.
    if url.chars().any(char::is_control) {
        return Err(UrlRefused::Malformed);
    }
    let parsed = Url::parse(url).map_err(|_| UrlRefused::Malformed)?;
    match parsed.scheme() {
        "https" => {}
        "http" if allow_insecure => {}
        "http" => return Err(UrlRefused::Scheme),
        _ => return Err(UrlRefused::Malformed),
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(UrlRefused::Credentials);
    }
    let port = parsed
        .port_or_known_default()
        .ok_or(UrlRefused::Malformed)?;
    let (host, addresses) = match parsed.host().ok_or(UrlRefused::Malformed)? {
        url::Host::Ipv4(ip) => (ip.to_string(), vec![SocketAddr::new(IpAddr::V4(ip), port)]),
        url::Host::Ipv6(ip) => (ip.to_string(), vec![SocketAddr::new(IpAddr::V6(ip), port)]),
        url::Host::Domain(domain) => {
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((domain, port))
                .await
                .map_err(|_| UrlRefused::Unresolvable)?
                .collect();
            (domain.to_owned(), resolved)
        }
    };
    if addresses.is_empty() {
        return Err(UrlRefused::Unresolvable);
    }
    if !addresses
        .iter()
        .all(|a| address_allowed(a.ip(), allow_insecure))
    {
        return Err(UrlRefused::NonPublicAddress);
    }
    Ok(CheckedUrl {
        url: parsed,
        host,
        addresses,
    })
}

/// Whether a webhook may be sent to `ip`.
pub fn address_allowed(ip: IpAddr, allow_insecure: bool) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_allowed(v4, allow_insecure),
        IpAddr::V6(v6) => {
            // Addresses that embed an IPv4 address are judged by it.
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4_allowed(v4, allow_insecure);
            }
            let segments = v6.segments();
            if segments[0] == 0x64 && segments[1] == 0xff9b {
                // NAT64 (64:ff9b::/96).
                let octets = v6.octets();
                return v4_allowed(
                    Ipv4Addr::new(octets[12], octets[13], octets[14], octets[15]),
                    allow_insecure,
                );
            }
            v6_allowed(v6, allow_insecure)
        }
    }
}

fn v4_allowed(ip: Ipv4Addr, allow_insecure: bool) -> bool {
    if ip.is_loopback() {
        return allow_insecure;
    }
    let [a, b, c, _] = ip.octets();
    let refused = ip.is_unspecified()
        || a == 0 // "this network"
        || ip.is_private() // 10/8, 172.16/12, 192.168/16
        || ip.is_link_local() // 169.254/16, cloud metadata
        || (a == 100 && (64..=127).contains(&b)) // shared address space (CGNAT), 100.100.100.200 metadata
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || ip.is_documentation()
        || ip.is_multicast()
        || ip.is_broadcast()
        || a >= 240; // reserved
    !refused
}

fn v6_allowed(ip: Ipv6Addr, allow_insecure: bool) -> bool {
    if ip.is_loopback() {
        return allow_insecure;
    }
    let first = ip.segments()[0];
    let refused = ip.is_unspecified()
        || (first & 0xfe00) == 0xfc00 // unique local fc00::/7 (fd00:ec2::254 metadata)
        || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated)
        || ip.is_multicast()
        || first == 0x2001 && ip.segments()[1] == 0x0db8 // documentation
        || ip.to_ipv4().is_some(); // IPv4-compatible ::a.b.c.d
    !refused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(ip: &str, insecure: bool) -> bool {
        address_allowed(ip.parse().unwrap(), insecure)
    }

    #[test]
    fn public_addresses_pass() {
        for ip in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(allowed(ip, false), "{ip}");
        }
    }

    #[test]
    fn every_non_public_range_is_refused_even_when_insecure() {
        for ip in [
            "10.0.0.1",
            "172.16.5.4",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "100.100.100.200",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.0.192",
            "::",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "ff02::1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!allowed(ip, false), "{ip} refused");
            assert!(!allowed(ip, true), "{ip} refused even with allow-insecure");
        }
    }

    #[test]
    fn loopback_only_with_allow_insecure() {
        for ip in ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"] {
            assert!(!allowed(ip, false), "{ip}");
            assert!(allowed(ip, true), "{ip}");
        }
    }

    #[tokio::test]
    async fn urls() {
        for url in [
            "http://127.0.0.1:9/x\0",
            "http://127.0.0.1:9/a\0b",
            "\u{1}http://127.0.0.1:9/x",
            "http://127.0.0.1:9/x\n",
        ] {
            assert_eq!(
                check_url(url, true).await.unwrap_err(),
                UrlRefused::Malformed,
                "{url:?}"
            );
        }
        assert_eq!(
            check_url("http://127.0.0.1:9/x", false).await.unwrap_err(),
            UrlRefused::Scheme
        );
        assert_eq!(
            check_url("https://127.0.0.1/x", false).await.unwrap_err(),
            UrlRefused::NonPublicAddress
        );
        assert_eq!(
            check_url("https://[fe80::1]/x", true).await.unwrap_err(),
            UrlRefused::NonPublicAddress
        );
        assert_eq!(
            check_url("https://user:pw@93.184.216.34/", false)
                .await
                .unwrap_err(),
            UrlRefused::Credentials
        );
        assert_eq!(
            check_url("ftp://93.184.216.34/", false).await.unwrap_err(),
            UrlRefused::Malformed
        );
        let ok = check_url("http://127.0.0.1:9/hook", true).await.unwrap();
        assert_eq!(ok.addresses, vec!["127.0.0.1:9".parse().unwrap()]);
        assert!(check_url("https://93.184.216.34/hook", false).await.is_ok());
        // localhost resolves to loopback: refused unless insecure.
        assert_eq!(
            check_url("https://localhost/x", false).await.unwrap_err(),
            UrlRefused::NonPublicAddress
        );
    }
}
