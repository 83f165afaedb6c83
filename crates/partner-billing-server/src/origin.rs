//! Where a change came from, for the audit trail: the peer's address (no port) and the
//! request's id, taken by an extractor a handler declares; the handler adds
//! the actor once its credentials are verified.

use std::net::IpAddr;
use std::sync::Arc;

use poem::{FromRequest, Request, RequestBody};

use partner_billing::audit::{Actor, Origin};
use partner_billing::request_scope;

/// The peer and request id of the request being served.
#[derive(Debug, Clone)]
pub struct RequestFacts {
    peer: Option<IpAddr>,
    request_id: Option<Arc<str>>,
}

impl RequestFacts {
    /// The facts of `req`.
    pub fn of(req: &Request) -> Self {
        Self {
            peer: req
                .remote_addr()
                .as_socket_addr()
                .map(|address| address.ip()),
            request_id: request_scope::current(),
        }
    }

    /// The peer's address.
    pub fn peer(&self) -> Option<IpAddr> {
        self.peer
    }

    /// The request id.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// A change of this request, made by `actor`.
    pub fn origin(&self, actor: Actor) -> Origin {
        Origin::http(actor, self.peer, self.request_id.as_deref())
    }
}

impl<'a> FromRequest<'a> for RequestFacts {
    async fn from_request(req: &'a Request, _body: &mut RequestBody) -> poem::Result<Self> {
        Ok(Self::of(req))
    }
}
