//! The panel's static files, embedded in the binary: nothing is loaded from another origin.

use poem::http::StatusCode;
use poem::web::Path;
use poem::{Response, handler};

const STYLESHEET: &str = include_str!("../../assets/panel.css");

/// The panel's icon: linked from every page, so a browser asks for no `/favicon.ico` (a `404`
/// in its console on every page).
const ICON: &str = include_str!("../../assets/favicon.svg");

/// `GET /panel/assets/{file}`.
#[handler]
pub fn file(Path(file): Path<String>) -> Response {
    match file.as_str() {
        "panel.css" => Response::builder()
            .content_type("text/css; charset=utf-8")
            .body(STYLESHEET),
        "favicon.svg" => Response::builder().content_type("image/svg+xml").body(ICON),
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .content_type("text/plain; charset=utf-8")
            .body("Not found"),
    }
}
