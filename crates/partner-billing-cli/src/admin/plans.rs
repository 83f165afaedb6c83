//! `partner-billing admin plan …`: the plans (products) and their promo policy.

use anyhow::Result;
use clap::Subcommand;
use partner_billing::audit::Origin;
use partner_billing::domain::PlanSlug;
use partner_billing::limits::PLAN_SETTING_MAX;
use partner_billing::plans::{self, NewPlan};
use partner_billing::store::Store;
use serde_json::json;

use crate::args;
use crate::output::{Output, table, utc};

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Creates a plan.
    Create {
        /// The plan's slug: 1-64 of a-z 0-9 . _ -.
        #[arg(long, value_name = "S", value_parser = args::plan_slug)]
        slug: PlanSlug,
        /// A display name.
        #[arg(long, value_name = "N")]
        name: String,
        /// Subscription length of a license in days; none for no end.
        #[arg(
            long,
            value_name = "D",
            allow_negative_numbers = true,
            value_parser = args::in_range(1, PLAN_SETTING_MAX)
        )]
        duration_days: Option<i64>,
        /// How many redemptions each promo code allows (default 1).
        #[arg(
            long,
            value_name = "R",
            allow_negative_numbers = true,
            value_parser = args::in_range(1, PLAN_SETTING_MAX)
        )]
        redemptions_per_code: Option<i64>,
        /// How long promo codes stay valid after generation (default 365).
        #[arg(
            long,
            value_name = "V",
            allow_negative_numbers = true,
            value_parser = args::in_range(1, PLAN_SETTING_MAX)
        )]
        code_validity_days: Option<i64>,
    },
    /// Lists the plans.
    List,
}

pub async fn run(store: &Store, cmd: PlanCommand, out: Output) -> Result<()> {
    match cmd {
        PlanCommand::Create {
            slug,
            name,
            duration_days,
            redemptions_per_code,
            code_validity_days,
        } => {
            let new = NewPlan::new(
                slug,
                &name,
                duration_days,
                redemptions_per_code,
                code_validity_days,
            )?;
            let plan = plans::create_plan(store, new, &Origin::cli()).await?;
            out.emit(&plan, || {
                format!("created plan {} ({})", plan.slug, plan.name)
            })
        }
        PlanCommand::List => {
            let plans = plans::list_plans(store).await?;
            out.emit(&json!({ "plans": plans }), || {
                let rows: Vec<Vec<String>> = plans
                    .iter()
                    .map(|p| {
                        vec![
                            p.slug.clone(),
                            p.name.clone(),
                            p.duration_days
                                .map_or_else(|| "-".to_owned(), |d| d.to_string()),
                            p.redemptions_per_code.to_string(),
                            p.code_validity_days.to_string(),
                            utc(p.created_utc),
                        ]
                    })
                    .collect();
                table(
                    &[
                        "SLUG",
                        "NAME",
                        "DURATION_DAYS",
                        "REDEMPTIONS_PER_CODE",
                        "CODE_VALIDITY_DAYS",
                        "CREATED",
                    ],
                    &rows,
                )
            })
        }
    }
}
