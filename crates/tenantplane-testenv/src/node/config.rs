//! The configuration files of the real node's processes (../shared/docs/real-node.md).

use std::path::Path;

/// The node's address, on bridge [`NODE_BRIDGE`], which has no uplink. It is also the
/// node's name: the API server reaches the kubelet at a node name that is an IP
/// without DNS and without `--kubelet-preferred-address-types`.
pub const NODE_IP: &str = "10.99.0.1";
/// An empty bridge holds the node IP (this kernel has no `dummy` links); the kubelet
/// rejects a loopback node IP.
pub const NODE_BRIDGE: &str = "rn0";
/// The bridge the CNI plugin attaches Pods to.
pub const POD_BRIDGE: &str = "rncni0";
pub const POD_CIDR: &str = "10.244.0.0/24";
/// The Service range of every testenv API server (`--service-cluster-ip-range`).
pub const SERVICE_CIDR: &str = "10.96.0.0/16";

pub fn containerd(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
[grpc]
  address = "{d}/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "local/pause:1"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Root here has no CAP_SYS_RESOURCE, so nobody may lower oom_score_adj: runc's
  # init dies writing the -998 CRI asks for a sandbox. Clamp to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni/net.d"
"#
    )
}

/// Bridge CNI. Pods get routes only to the Service range and the node: no default
/// route, so nothing a Pod sends can leave the machine.
pub fn cni(dir: &Path) -> String {
    let ipam_dir = dir.join("cni/ipam");
    serde_json::json!({
        "cniVersion": "0.4.0", "name": "tenantplane-real-node",
        "plugins": [
            {"type": "bridge", "bridge": POD_BRIDGE, "isGateway": true, "ipMasq": false, "hairpinMode": true,
             "ipam": {"type": "host-local", "dataDir": ipam_dir, "ranges": [[{"subnet": POD_CIDR}]],
                      "routes": [{"dst": SERVICE_CIDR}, {"dst": format!("{NODE_IP}/32")}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
    .to_string()
}

pub fn kubelet(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {NODE_IP}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
# The API server reaches the kubelet anonymously and does not verify its
# self-signed certificate: logs, exec and port-forward need no more.
authentication: {{anonymous: {{enabled: true}}, webhook: {{enabled: false}}}}
authorization: {{mode: AlwaysAllow}}
cgroupDriver: cgroupfs
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
runtimeRequestTimeout: 2m
volumePluginDir: {d}/kubelet/volume-plugins
evictionHard: {{"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%"}}
# Report status every second, not every 10 s: the node turns Ready at the first
# report after containerd and its network are up, so this is most of a start's wait.
# A report writes only what changed.
nodeStatusUpdateFrequency: 1s
# Never collect the local images: nothing can pull them back.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"#
    )
}

pub fn kube_proxy(kubeconfig: &Path) -> String {
    let kc = kubeconfig.display();
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: "{kc}"}}
mode: iptables
clusterCIDR: {POD_CIDR}
hostnameOverride: {NODE_IP}
bindAddress: {NODE_IP}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Zero leaves the machine's conntrack sysctls alone.
conntrack: {{maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
"#
    )
}
