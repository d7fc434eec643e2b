//! The relay leg of the non-chat endpoints (spec 4.6, 4.7, 4.19–4.22).

use crate::errors::GatewayError;
use crate::gateway::Gateway;
use crate::media::Media;
use crate::proxy::Ctx;
use pingora::proxy::Session;

pub async fn handle(
    gw: &Gateway,
    session: &mut Session,
    ctx: &mut Ctx,
    media: &Media,
) -> Result<(), GatewayError> {
    todo!()
}
