//! Command-line interface.

use anyhow::Context;
use clap::{Parser, Subcommand};
use tenantplane_core::explain::{ExplainRequest, explain, explain_object};
use tenantplane_core::selectors::TenantNamespaces;

use crate::connect::{self, ConnectArgs};
use crate::controller::{self, ControllerArgs};
use crate::dns::{self, DnsArgs};
use crate::output::{self, Format};
use crate::render::{self, RenderTarget};
use crate::status::{self, StatusArgs};
use crate::up::{self, UpArgs};
use crate::webhook::{self, WebhookArgs};
use crate::why::{self, WhyArgs};

#[derive(Debug, Parser)]
#[command(
    name = "tenantplane",
    version,
    about = "Multi-tenancy control plane for Kubernetes"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Predict, offline, where a tenant object lands on the host and what it is stamped with.
    ExplainSync(ExplainSyncArgs),
    /// Print a tenantplane resource, ready for `kubectl apply -f -`.
    Render {
        #[command(subcommand)]
        target: RenderTarget,
    },
    /// Serve the validating admission webhook for tenantplane's resources over HTTPS.
    Webhook(WebhookArgs),
    /// Run the TenantCluster controller and its sync engines against the host cluster.
    Controller(Box<ControllerArgs>),
    /// Explain a host object: the tenant object behind it and the latest decisions about it.
    Why(WhyArgs),
    /// Print or merge into your kubeconfig the tenant's kubeconfig, as a context named after the TenantCluster.
    Connect(ConnectArgs),
    /// Every TenantCluster and Tenant at a glance: phase, synced kinds, last decision, recent errors.
    Status(StatusArgs),
    /// A local playground: host and tenant API servers, tenantplane, decisions as they happen.
    Up(UpArgs),
    /// Serve one TenantCluster's DNS (its Services and Pods under the cluster domain).
    Dns(DnsArgs),
    /// Print every tenantplane CRD as one YAML stream.
    Crds,
    /// Print the version.
    Version,
    /// Print a shell completion script: `source <(tenantplane completion bash)`.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The name the binary was run under decides how it presents itself: as
/// `kubectl-tenantplane` (a symlink or copy on PATH) it is the kubectl plugin
/// `kubectl tenantplane`, with kubectl's flags, help and completions named so.
pub fn display_name(argv0: Option<&std::ffi::OsStr>) -> &'static str {
    let base = argv0
        .map(std::path::Path::new)
        .and_then(std::path::Path::file_stem)
        .and_then(|s| s.to_str());
    match base {
        Some("kubectl-tenantplane") => "kubectl tenantplane",
        _ => "tenantplane",
    }
}

/// Parses the command line, presenting the binary under the name it was run as.
pub fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let name = display_name(std::env::args_os().next().as_deref());
    let matches = Cli::command().bin_name(name).try_get_matches()?;
    Cli::from_arg_matches(&matches)
}

#[derive(Debug, clap::Args)]
pub struct ExplainSyncArgs {
    /// The TenantCluster's name.
    #[arg(long, required_unless_present = "host_object")]
    pub tenant: Option<String>,
    /// The TenantCluster's namespace on the host.
    #[arg(long, required_unless_present = "host_object")]
    pub tenant_namespace: Option<String>,
    /// The tenant object's name.
    #[arg(long, required_unless_present = "file")]
    pub name: Option<String>,
    /// A whole tenant object (YAML or JSON): also prints the host copy's rewritten
    /// label selectors, or why the engine would skip it. Its own kind, name and
    /// namespace are used.
    #[arg(short = 'f', long = "filename", conflicts_with = "name")]
    pub file: Option<std::path::PathBuf>,
    /// Two-way mode: the host object (YAML or JSON) to compare the tenant object
    /// (`-f`) with. Prints what one pass would write on each side, and the
    /// conflicts, for every direction and conflict policy.
    #[arg(long, requires = "file")]
    pub host_object: Option<std::path::PathBuf>,
    /// Two-way mode: the content both sides last agreed on (YAML or JSON object).
    /// Without it, the pass is the first one.
    #[arg(long, requires = "host_object")]
    pub base: Option<std::path::PathBuf>,
    /// The tenant object's namespace inside the tenant cluster.
    #[arg(long, default_value = "default")]
    pub virtual_namespace: String,
    #[arg(long, default_value = "Pod")]
    pub kind: String,
    #[arg(long, default_value = "v1")]
    pub api_version: String,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Yaml)]
    pub output: Format,
}

/// Reads one object from a YAML or JSON file.
fn read_object(path: &std::path::Path) -> anyhow::Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let object: serde_json::Value =
        serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if !object.is_object() {
        anyhow::bail!("{} does not hold an object", path.display());
    }
    Ok(object)
}

/// `explain-sync -f T --host-object H [--base B]`: one two-way pass, predicted for
/// every direction and policy with the engine's own planner.
fn explain_two_way(
    tenant_file: &std::path::Path,
    host_file: &std::path::Path,
    base_file: Option<&std::path::Path>,
    format: Format,
) -> anyhow::Result<String> {
    use tenantplane_core::three_way::{every_direction, flatten};
    let tenant = read_object(tenant_file)?;
    let host = read_object(host_file)?;
    let base = base_file.map(read_object).transpose()?.map(|b| flatten(&b));
    let rows = every_direction(base.as_ref(), &tenant, &host, &[]);
    output::render(&rows, format)
}

/// Runs a command and returns what it prints on stdout.
pub fn run(cli: Cli) -> anyhow::Result<String> {
    match cli.command {
        Command::ExplainSync(args) => {
            if let (Some(tenant_file), Some(host_file)) = (&args.file, &args.host_object) {
                return explain_two_way(tenant_file, host_file, args.base.as_deref(), args.output);
            }
            let tenant = args.tenant.context("--tenant is required")?;
            let tenant_namespace = args
                .tenant_namespace
                .context("--tenant-namespace is required")?;
            let explanation = match (&args.file, args.name) {
                (Some(path), _) => {
                    let object = read_object(path)?;
                    // Offline there are no tenant namespaces to evaluate a labelled
                    // NetworkPolicy namespaceSelector against: it matches nothing.
                    explain_object(
                        &tenant,
                        &tenant_namespace,
                        &object,
                        &TenantNamespaces::new(),
                    )?
                }
                (None, name) => explain(&ExplainRequest {
                    tenant,
                    tenant_namespace,
                    virtual_namespace: args.virtual_namespace,
                    name: name.context("--name or -f is required")?,
                    api_version: args.api_version,
                    kind: args.kind,
                })?,
            };
            output::render(&explanation, args.output)
        }
        Command::Render { target } => render::run(target),
        // A server: it prints nothing on stdout, its logs go to stderr.
        Command::Webhook(args) => webhook::run(args).map(|()| String::new()),
        Command::Controller(args) => controller::run(*args).map(|()| String::new()),
        Command::Why(args) => why::run(args),
        Command::Connect(args) => connect::run(args),
        Command::Status(args) => status::run(args),
        Command::Dns(args) => dns::run(args).map(|()| String::new()),
        // `up` prints decisions as they happen, so it writes stdout itself.
        Command::Up(args) => up::run(args).map(|()| String::new()),
        Command::Crds => tenantplane_api::crds_yaml().context("rendering CRDs"),
        Command::Completion { shell } => {
            use clap::CommandFactory;
            let mut out = Vec::new();
            // Completions follow the name the user types: for the plugin, kubectl
            // completes `kubectl tenantplane` through the `kubectl-tenantplane` script.
            let name = display_name(std::env::args_os().next().as_deref()).replace(' ', "-");
            clap_complete::generate(shell, &mut Cli::command(), name, &mut out);
            String::from_utf8(out).context("completion script is not UTF-8")
        }
        Command::Version => Ok(format!(
            "tenantplane {} (API {}/{})\n",
            env!("CARGO_PKG_VERSION"),
            tenantplane_api::GROUP,
            tenantplane_api::VERSION
        )),
    }
}
