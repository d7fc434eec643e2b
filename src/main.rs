//! The `model-gateway` command: run the gateway, check a configuration, manage keys and
//! groups, reconcile the ledger with a provider's usage report.

use clap::{Args, Parser, Subcommand};
use model_gateway::api::groups::{self, GroupInput};
use model_gateway::api::keys::{self, KeyInput};
use model_gateway::api::policy::PolicyInput;
use model_gateway::billing::Calendar;
use model_gateway::config::{Config, LogFormat};
use model_gateway::errors::GatewayError;
use model_gateway::gateway::open_store;
use model_gateway::reconcile::{self, ReconcileError};
use model_gateway::store::Store;
use std::path::PathBuf;
use std::process::ExitCode;

/// jemalloc: under load glibc's malloc spent a large share of the proxy threads' CPU (arena
/// locks, consolidation passes) and kept more memory resident per idle stream (README,
/// "Benchmarks", for the figures).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "model-gateway",
    version,
    about = "An LLM gateway: one base URL and one key in front of many model providers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve {
        #[command(flatten)]
        cfg: ConfigArg,
        /// Take the listening sockets over from a running gateway (graceful upgrade): start
        /// this, then send SIGQUIT to the running process.
        #[arg(long, short)]
        upgrade: bool,
    },
    /// Validate a configuration file; exits non-zero naming the bad field.
    CheckConfig(ConfigArg),
    /// Manage API keys in the configured store.
    Keys {
        #[command(subcommand)]
        action: KeysAction,
    },
    /// Manage groups of keys (a team, a customer) in the configured store.
    Groups {
        #[command(subcommand)]
        action: GroupsAction,
    },
    /// Compare the ledger with a provider's own usage report, by UTC day and model; exits
    /// 1 when a cost difference passes --max-diff-usd, 2 on errors.
    Reconcile(Box<ReconcileArgs>),
}

#[derive(Args)]
struct ReconcileArgs {
    #[command(flatten)]
    cfg: ConfigArg,
    /// Whose usage report: `openai` (admin key in OPENAI_ADMIN_KEY) or `anthropic`
    /// (ANTHROPIC_ADMIN_KEY).
    #[arg(long, value_parser = ["openai", "anthropic"])]
    provider: String,
    /// First UTC day, YYYY-MM-DD.
    #[arg(long)]
    from: String,
    /// Last UTC day, YYYY-MM-DD (included).
    #[arg(long)]
    to: String,
    /// A channel to reconcile (repeatable); default: every channel of the provider's
    /// protocol.
    #[arg(long = "channel", value_name = "NAME")]
    channels: Vec<String>,
    /// Read the report from a saved answer of the API (one page or an array of pages)
    /// instead of asking the API.
    #[arg(long, value_name = "F")]
    file: Option<PathBuf>,
    /// The usage API's base URL; default: the vendor's API host.
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// Largest cost difference in USD a row may have before the run fails.
    #[arg(long, default_value = "0.01", value_name = "USD")]
    max_diff_usd: String,
    /// Take the report's model REPORTED as the upstream model UPSTREAM (repeatable).
    #[arg(long = "alias", value_name = "REPORTED=UPSTREAM")]
    aliases: Vec<String>,
    /// Only the usage of this upstream API key id (repeatable).
    #[arg(long = "api-key-id", value_name = "ID")]
    api_key_ids: Vec<String>,
    /// OpenAI: only the usage of this project id (repeatable).
    #[arg(long = "project", value_name = "ID")]
    projects: Vec<String>,
    /// Anthropic: only the usage of this workspace id (repeatable).
    #[arg(long = "workspace", value_name = "ID")]
    workspaces: Vec<String>,
    /// Print the rows as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ConfigArg {
    #[arg(long, short, default_value = "conf/gateway.yaml")]
    config: PathBuf,
}

#[derive(Args)]
struct KeyFields {
    #[arg(long)]
    name: Option<String>,
    /// Model whitelist, comma separated; empty for every model.
    #[arg(long, value_delimiter = ',')]
    models: Option<Vec<String>>,
    /// Spend cap in USD; `none` for unlimited.
    #[arg(long)]
    quota_usd: Option<String>,
    /// RFC 3339 time after which the key stops working; `none` to clear.
    #[arg(long)]
    expires_at: Option<String>,
    /// IP allowlist (CIDRs or addresses), comma separated.
    #[arg(long, value_delimiter = ',')]
    allow_ips: Option<Vec<String>>,
    /// Requests per minute; `none` for no limit.
    #[arg(long)]
    rpm: Option<String>,
    /// `enabled` or `disabled`.
    #[arg(long)]
    status: Option<String>,
    /// The group whose limits the key's requests must fit as well; `none` for none.
    #[arg(long)]
    group: Option<String>,
    #[command(flatten)]
    policy: PolicyFields,
}

/// Limits keys and groups share; each takes `none` to clear it.
#[derive(Args)]
struct PolicyFields {
    /// Spend budget per day in USD (calendar day in the time zone).
    #[arg(long)]
    budget_day_usd: Option<String>,
    /// Spend budget per week (Monday to Sunday) in USD.
    #[arg(long)]
    budget_week_usd: Option<String>,
    /// Spend budget per calendar month in USD.
    #[arg(long)]
    budget_month_usd: Option<String>,
    /// Tokens per minute.
    #[arg(long)]
    tpm: Option<String>,
    /// Requests and streams in flight at once.
    #[arg(long)]
    max_concurrent: Option<String>,
    /// IANA time zone of the budgets' calendar (default: the gateway's `limits.time_zone`).
    #[arg(long)]
    time_zone: Option<String>,
    /// What requests are charged per USD of provider cost (a reseller's 1.2); a key's
    /// own takes precedence over its group's.
    #[arg(long)]
    price_multiplier: Option<String>,
}

#[derive(Args)]
struct GroupFields {
    #[arg(long)]
    name: Option<String>,
    /// Lifetime spend cap of the whole group in USD; `none` for unlimited.
    #[arg(long)]
    quota_usd: Option<String>,
    /// `enabled` or `disabled` (a disabled group's keys are refused).
    #[arg(long)]
    status: Option<String>,
    #[command(flatten)]
    policy: PolicyFields,
}

#[derive(Subcommand)]
enum GroupsAction {
    /// Create a group.
    Create {
        #[command(flatten)]
        cfg: ConfigArg,
        id: String,
        #[command(flatten)]
        fields: GroupFields,
    },
    /// List every group.
    List(ConfigArg),
    /// Show one group, each limit with what is used and left now, and its keys.
    Show {
        #[command(flatten)]
        cfg: ConfigArg,
        id: String,
    },
    /// Change a group's fields.
    Update {
        #[command(flatten)]
        cfg: ConfigArg,
        id: String,
        #[command(flatten)]
        fields: GroupFields,
    },
    /// Delete a group no key belongs to.
    Delete {
        #[command(flatten)]
        cfg: ConfigArg,
        id: String,
    },
}

#[derive(Subcommand)]
enum KeysAction {
    /// Create a key and print it (shown once).
    Create {
        #[command(flatten)]
        cfg: ConfigArg,
        #[command(flatten)]
        fields: KeyFields,
        /// Print the whole record, key included, as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List every key.
    List(ConfigArg),
    /// Show one key.
    Show {
        #[command(flatten)]
        cfg: ConfigArg,
        id: String,
    },
    /// Change a key's fields.
    Update {
        #[command(flatten)]
        cfg: ConfigArg,
        id: String,
        #[command(flatten)]
        fields: KeyFields,
    },
    /// Delete a key; it stops working on every instance within the key cache TTL.
    Revoke {
        #[command(flatten)]
        cfg: ConfigArg,
        id: String,
    },
}

fn none_or<T>(v: &Option<String>, what: &str) -> Result<Option<Option<T>>, String>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    match v.as_deref() {
        None => Ok(None),
        Some("none") | Some("null") => Ok(Some(None)),
        Some(s) => s
            .parse()
            .map(|x| Some(Some(x)))
            .map_err(|e| format!("--{what}: `{s}` is not valid: {e}")),
    }
}

impl KeyFields {
    fn input(&self) -> Result<KeyInput, String> {
        Ok(KeyInput {
            name: self.name.clone(),
            status: self.status.clone(),
            models: self.models.clone(),
            quota_usd: none_or(&self.quota_usd, "quota-usd")?,
            expires_at: match self.expires_at.as_deref() {
                None => None,
                Some("none") | Some("null") => Some(None),
                Some(s) => Some(Some(s.to_string())),
            },
            allow_ips: self.allow_ips.clone(),
            rpm: none_or(&self.rpm, "rpm")?,
            group: none_or(&self.group, "group")?,
            policy: self.policy.input()?,
        })
    }
}

impl PolicyFields {
    fn input(&self) -> Result<PolicyInput, String> {
        Ok(PolicyInput {
            budget_day_usd: none_or(&self.budget_day_usd, "budget-day-usd")?,
            budget_week_usd: none_or(&self.budget_week_usd, "budget-week-usd")?,
            budget_month_usd: none_or(&self.budget_month_usd, "budget-month-usd")?,
            tpm: none_or(&self.tpm, "tpm")?,
            max_concurrent: none_or(&self.max_concurrent, "max-concurrent")?,
            time_zone: none_or(&self.time_zone, "time-zone")?,
            price_multiplier: none_or(&self.price_multiplier, "price-multiplier")?,
        })
    }
}

impl GroupFields {
    fn input(&self, id: Option<String>) -> Result<GroupInput, String> {
        Ok(GroupInput {
            id,
            name: self.name.clone(),
            status: self.status.clone(),
            quota_usd: none_or(&self.quota_usd, "quota-usd")?,
            policy: self.policy.input()?,
        })
    }
}

fn load(cfg: &ConfigArg) -> Result<Config, String> {
    Config::load(&cfg.config).map_err(|e| format!("{}: {e}", cfg.config.display()))
}

fn gw_err(e: GatewayError) -> String {
    match e.param() {
        Some(p) => format!("{p}: {}", e.message()),
        None => e.message(),
    }
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// The CLI's runtime: one thread, for a few store calls.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

async fn cli_store(cfg: &Config) -> Result<std::sync::Arc<dyn Store>, String> {
    open_store(&cfg.store, false)
        .await
        .map_err(|e| format!("cannot open the store: {e}"))
}

fn keys_command(action: KeysAction) -> Result<(), String> {
    let cfg = match &action {
        KeysAction::Create { cfg, .. }
        | KeysAction::Show { cfg, .. }
        | KeysAction::Update { cfg, .. }
        | KeysAction::Revoke { cfg, .. }
        | KeysAction::List(cfg) => load(cfg)?,
    };
    runtime()?.block_on(async move {
        let store = cli_store(&cfg).await?;
        let store = store.as_ref();
        match action {
            KeysAction::Create { fields, json, .. } => {
                let (_, view) = keys::create(store, &fields.input()?)
                    .await
                    .map_err(gw_err)?;
                if json {
                    println!("{}", pretty(&view));
                } else {
                    println!("{}", view["key"].as_str().unwrap_or_default());
                    eprintln!(
                        "id: {} (the key is shown once; store it now)",
                        view["id"].as_str().unwrap_or_default()
                    );
                }
            }
            KeysAction::List(_) => {
                println!("{}", pretty(&keys::list(store).await.map_err(gw_err)?))
            }
            KeysAction::Show { id, .. } => {
                println!(
                    "{}",
                    pretty(&keys::view(&keys::show(store, &id).await.map_err(gw_err)?))
                )
            }
            KeysAction::Update { id, fields, .. } => {
                let rec = keys::update(store, &id, &fields.input()?)
                    .await
                    .map_err(gw_err)?;
                println!("{}", pretty(&keys::view(&rec)));
            }
            KeysAction::Revoke { id, .. } => {
                keys::revoke(store, &id).await.map_err(gw_err)?;
                println!("revoked {id}");
            }
        }
        Ok(())
    })
}

fn groups_command(action: GroupsAction) -> Result<(), String> {
    let cfg = match &action {
        GroupsAction::Create { cfg, .. }
        | GroupsAction::Show { cfg, .. }
        | GroupsAction::Update { cfg, .. }
        | GroupsAction::Delete { cfg, .. }
        | GroupsAction::List(cfg) => load(cfg)?,
    };
    runtime()?.block_on(async move {
        let store = cli_store(&cfg).await?;
        let store = store.as_ref();
        let calendar = Calendar::new(&cfg.limits.time_zone);
        let v = match action {
            GroupsAction::Create { id, fields, .. } => {
                let g = groups::create(store, &fields.input(Some(id))?)
                    .await
                    .map_err(gw_err)?;
                groups::view(&g)
            }
            GroupsAction::List(_) => groups::list(store).await.map_err(gw_err)?,
            GroupsAction::Show { id, .. } => {
                let g = groups::show(store, &id).await.map_err(gw_err)?;
                groups::detail(store, &calendar, &g).await.map_err(gw_err)?
            }
            GroupsAction::Update { id, fields, .. } => {
                let g = groups::update(store, &id, &fields.input(None)?)
                    .await
                    .map_err(gw_err)?;
                groups::view(&g)
            }
            GroupsAction::Delete { id, .. } => {
                groups::delete(store, &id).await.map_err(gw_err)?;
                serde_json::json!({"id": id, "deleted": true})
            }
        };
        println!("{}", pretty(&v));
        Ok(())
    })
}

impl ReconcileArgs {
    fn options(&self) -> Result<reconcile::Options, ReconcileError> {
        let provider =
            reconcile::Provider::parse(&self.provider).ok_or_else(|| ReconcileError::Argument {
                flag: "--provider",
                message: format!("`{}` is not openai or anthropic", self.provider),
            })?;
        Ok(reconcile::Options {
            provider,
            range: reconcile::Range::parse(&self.from, &self.to)?,
            channels: self.channels.clone(),
            source: reconcile::Source::choose(
                provider,
                self.file.clone(),
                self.base_url.clone(),
                std::env::var(provider.admin_key_var()).ok(),
            )?,
            filter: reconcile::ReportFilter {
                api_key_ids: self.api_key_ids.clone(),
                projects: self.projects.clone(),
                workspaces: self.workspaces.clone(),
            },
            aliases: reconcile::parse_aliases(&self.aliases)?,
            max_diff: reconcile::parse_max_diff(&self.max_diff_usd)?,
        })
    }
}

/// `Ok(true)` when every difference is within the threshold.
fn reconcile_command(args: &ReconcileArgs) -> Result<bool, String> {
    let opts = args.options().map_err(|e| reconcile::chain(&e))?;
    let cfg = load(&args.cfg)?;
    let report = runtime()?.block_on(async {
        let store = cli_store(&cfg).await?;
        reconcile::run(&cfg, store.as_ref(), &opts)
            .await
            .map_err(|e| reconcile::chain(&e))
    })?;
    if args.json {
        println!("{}", pretty(&report.json()));
    } else {
        print!("{}", report.table());
    }
    Ok(report.past() == 0)
}

/// The log goes to stderr, as text or as one JSON object per line (`log.format`).
/// `RUST_LOG` filters it; the access log's target is `access`.
fn init_log(format: LogFormat) {
    let default = || tracing_subscriber::EnvFilter::new("info,pingora=warn");
    // Unset, the default applies; set but not understood, the default applies and says why.
    let (filter, not_understood) = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(f) => (f, None),
        Err(e) => (default(), std::env::var_os("RUST_LOG").map(|_| e)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    if let Some(e) = not_understood {
        tracing::warn!(error = %e, "RUST_LOG not understood; logging at the default levels");
    }
}

fn main() -> ExitCode {
    let command = Cli::parse().command;
    let result = match command {
        Command::Serve { cfg, upgrade } => load(&cfg).and_then(|c| {
            init_log(c.log_format);
            model_gateway::server::serve(c, upgrade)
        }),
        Command::CheckConfig(cfg) => load(&cfg).map(|c| {
            println!(
                "{}: ok ({} channels, {} priced models)",
                cfg.config.display(),
                c.channels.len(),
                c.prices.len()
            );
        }),
        Command::Keys { action } => {
            init_log(LogFormat::Text);
            keys_command(action)
        }
        Command::Groups { action } => {
            init_log(LogFormat::Text);
            groups_command(action)
        }
        Command::Reconcile(args) => {
            init_log(LogFormat::Text);
            // 0 within the threshold, 1 past it, 2 when the sides could not be compared.
            return match reconcile_command(&args) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            };
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
