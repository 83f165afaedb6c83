//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!` embeds the
//! migration files, but cargo does not know to watch them.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
