//! The CORS grant on the answers Tether writes itself to a page of a configured foreign
//! origin (`allowed_origins`, see `client::site`): a Pingora downstream module, so that
//! every response header written for the request carries it (JSON, SSE streams, files,
//! errors) without each handler having to remember it.

use std::any::Any;

use async_trait::async_trait;
use pingora::http::ResponseHeader;
use pingora::modules::http::{HttpModule, HttpModuleBuilder, Module};
use pingora::Result;

use crate::client::site;

/// The per-request state: the origin granted, when `request_filter` granted one.
#[derive(Default)]
pub struct Grant {
    pub origin: Option<String>,
}

#[async_trait]
impl HttpModule for Grant {
    async fn response_header_filter(
        &mut self,
        resp: &mut ResponseHeader,
        _end_of_stream: bool,
    ) -> Result<()> {
        if let Some(origin) = &self.origin {
            for (name, value) in site::response_grant(origin) {
                resp.insert_header(name, value)?;
            }
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

pub struct GrantBuilder;

impl HttpModuleBuilder for GrantBuilder {
    fn init(&self) -> Module {
        Box::new(Grant::default())
    }
}
