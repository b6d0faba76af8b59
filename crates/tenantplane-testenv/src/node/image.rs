//! Container images made locally, without a registry: one-layer docker-archive
//! tarballs (the `docker save` layout `ctr images import` reads).
//!
//! A tarball holds `manifest.json`, the image config `<sha256>.json` and the layer
//! `<sha256>/layer.tar`; the layer is a plain ustar archive written here, so the
//! images need no tool besides the binaries they carry.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::{Error, Result, io_err};

/// One entry of an image's filesystem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Dir {
        path: String,
        mode: u32,
    },
    File {
        path: String,
        mode: u32,
        data: Vec<u8>,
    },
    Symlink {
        path: String,
        target: String,
    },
}

/// A one-layer image: its tag (`local/busybox:1`), filesystem and process.
#[derive(Clone, Debug)]
pub struct Image {
    pub tag: String,
    pub entries: Vec<Entry>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
}

/// The base every local image shares: the directories a container runtime mounts
/// over or a program expects, and users root and nobody.
fn base_entries() -> Vec<Entry> {
    let mut entries: Vec<Entry> = ["bin", "etc", "proc", "sys", "dev", "var", "root"]
        .iter()
        .map(|d| Entry::Dir {
            path: (*d).to_owned(),
            mode: 0o755,
        })
        .collect();
    entries.push(Entry::Dir {
        path: "tmp".into(),
        mode: 0o1777,
    });
    entries.push(Entry::File {
        path: "etc/passwd".into(),
        mode: 0o644,
        data: b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n".to_vec(),
    });
    entries.push(Entry::File {
        path: "etc/group".into(),
        mode: 0o644,
        data: b"root:x:0:\nnobody:x:65534:\n".to_vec(),
    });
    entries
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(io_err(format!("read {}", path.display())))
}

impl Image {
    /// `local/busybox:1`: a static busybox, a symlink per applet (`sh`, `httpd`,
    /// `wget`, ...), and `/www/index.html` for `httpd -h /www`.
    pub fn busybox(busybox: &Path) -> Result<Self> {
        let list = Command::new(busybox)
            .arg("--list")
            .output()
            .map_err(io_err(format!("run {} --list", busybox.display())))?;
        if !list.status.success() {
            return Err(Error::Image(format!(
                "{} --list failed ({})",
                busybox.display(),
                list.status
            )));
        }
        let mut entries = base_entries();
        entries.push(Entry::File {
            path: "bin/busybox".into(),
            mode: 0o755,
            data: read(busybox)?,
        });
        for applet in String::from_utf8_lossy(&list.stdout).split_whitespace() {
            // Applet names are plain words; anything else is not an applet.
            if applet != "busybox"
                && applet
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.[".contains(c))
            {
                entries.push(Entry::Symlink {
                    path: format!("bin/{applet}"),
                    target: "busybox".into(),
                });
            }
        }
        entries.push(Entry::Dir {
            path: "www".into(),
            mode: 0o755,
        });
        entries.push(Entry::File {
            path: "www/index.html".into(),
            mode: 0o644,
            data: b"hello\n".to_vec(),
        });
        Ok(Self {
            tag: "local/busybox:1".into(),
            entries,
            entrypoint: None,
            cmd: Some(vec!["sh".into()]),
        })
    }

    /// One static binary at `/<name>` as the entrypoint (`local/pause:1` from the
    /// static pause binary; any CGO-free Go binary works the same way).
    pub fn static_binary(tag: &str, binary: &Path, name: &str) -> Result<Self> {
        let mut entries = base_entries();
        entries.push(Entry::File {
            path: name.to_owned(),
            mode: 0o755,
            data: read(binary)?,
        });
        Ok(Self {
            tag: tag.to_owned(),
            entries,
            entrypoint: Some(vec![format!("/{name}")]),
            cmd: None,
        })
    }

    /// A dynamically linked binary at `/<name>` as the entrypoint, with the shared
    /// libraries and loader `ldd` names, at the paths it names (the `tenantplane`
    /// image from the project's own binary, which links glibc).
    pub fn with_shared_libraries(tag: &str, binary: &Path, name: &str) -> Result<Self> {
        let mut image = Self::static_binary(tag, binary, name)?;
        image.add_shared_libraries(binary)?;
        Ok(image)
    }

    /// Several binaries, each at `/bin/<name>` (on the image's `PATH`), with the
    /// shared libraries they link, and no entrypoint: Pods name the binary as their
    /// command (the `k8s` control-plane image: kube-apiserver, kube-controller-manager
    /// and etcd, run as the upstream images run them).
    pub fn binaries(tag: &str, binaries: &[(&Path, &str)]) -> Result<Self> {
        let mut image = Self {
            tag: tag.to_owned(),
            entries: base_entries(),
            entrypoint: None,
            cmd: None,
        };
        for (binary, name) in binaries {
            image.entries.push(Entry::File {
                path: format!("bin/{name}"),
                mode: 0o755,
                data: read(binary)?,
            });
            image.add_shared_libraries(binary)?;
        }
        Ok(image)
    }

    /// Adds the libraries and loader `binary` links (none for a static binary), each
    /// once, with their parent directories.
    fn add_shared_libraries(&mut self, binary: &Path) -> Result<()> {
        let ldd = Command::new("ldd")
            .arg(binary)
            .output()
            .map_err(io_err(format!("run ldd {}", binary.display())))?;
        let listing = String::from_utf8_lossy(&ldd.stdout);
        let libraries = shared_libraries(&listing);
        if !ldd.status.success() && libraries.is_empty() {
            // "not a dynamic executable": the binary alone is enough.
            return Ok(());
        }
        let mut present: Vec<String> = self
            .entries
            .iter()
            .map(|e| match e {
                Entry::Dir { path, .. }
                | Entry::File { path, .. }
                | Entry::Symlink { path, .. } => path.clone(),
            })
            .collect();
        for library in libraries {
            let relative = library.trim_start_matches('/');
            if present.iter().any(|p| p == relative) {
                continue;
            }
            // Parents first, outermost first.
            let mut parents: Vec<String> = Path::new(relative)
                .ancestors()
                .skip(1)
                .filter(|d| !d.as_os_str().is_empty())
                .map(|d| d.display().to_string())
                .collect();
            parents.reverse();
            for dir in parents {
                if !present.contains(&dir) {
                    self.entries.push(Entry::Dir {
                        path: dir.clone(),
                        mode: 0o755,
                    });
                    present.push(dir);
                }
            }
            self.entries.push(Entry::File {
                path: relative.to_owned(),
                mode: 0o755,
                data: read(Path::new(library))?,
            });
            present.push(relative.to_owned());
        }
        Ok(())
    }

    /// The image as a docker-archive tarball.
    pub fn docker_archive(&self) -> Result<Vec<u8>> {
        let mut layer = TarWriter::default();
        for entry in &self.entries {
            layer.entry(entry)?;
        }
        let layer = layer.finish();
        let layer_sha = sha256_hex(&layer);
        let config = json!({
            "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
            "config": {"Env": ["PATH=/bin"], "Entrypoint": self.entrypoint, "Cmd": self.cmd, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_sha}")]},
        })
        .to_string()
        .into_bytes();
        let config_sha = sha256_hex(&config);
        let manifest = json!([{
            "Config": format!("{config_sha}.json"),
            "RepoTags": [self.tag],
            "Layers": [format!("{layer_sha}/layer.tar")],
        }])
        .to_string()
        .into_bytes();
        let mut archive = TarWriter::default();
        for (path, data) in [
            (format!("{layer_sha}/layer.tar"), layer),
            (format!("{config_sha}.json"), config),
            ("manifest.json".to_owned(), manifest),
        ] {
            archive.entry(&Entry::File {
                path,
                mode: 0o644,
                data,
            })?;
        }
        Ok(archive.finish())
    }
}

/// The absolute paths of the libraries and loader in `ldd` output
/// (`libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)`, `/lib64/ld-linux-x86-64.so.2 (0x...)`);
/// the vDSO has no file and is left out.
fn shared_libraries(ldd: &str) -> Vec<&str> {
    ldd.lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = match line.split_once("=>") {
                Some((_, target)) => target.trim(),
                None => line,
            };
            path.split_whitespace()
                .next()
                .filter(|p| p.starts_with('/'))
        })
        .collect()
}

fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A ustar archive writer: enough for short paths, files, directories and symlinks.
#[derive(Default)]
struct TarWriter {
    out: Vec<u8>,
}

const BLOCK: usize = 512;

impl TarWriter {
    fn entry(&mut self, entry: &Entry) -> Result<()> {
        let (path, mode, type_flag, link, data): (&str, u32, u8, &str, &[u8]) = match entry {
            Entry::Dir { path, mode } => (path, *mode, b'5', "", &[]),
            Entry::File { path, mode, data } => (path, *mode, b'0', "", data),
            Entry::Symlink { path, target } => (path, 0o777, b'2', target, &[]),
        };
        if path.len() >= 100 || link.len() >= 100 {
            return Err(Error::Image(format!(
                "tar path too long for ustar: {path} -> {link}"
            )));
        }
        let mut header = [0u8; BLOCK];
        header[..path.len()].copy_from_slice(path.as_bytes());
        octal(&mut header[100..108], u64::from(mode));
        octal(&mut header[108..116], 0); // uid
        octal(&mut header[116..124], 0); // gid
        octal(&mut header[124..136], data.len() as u64);
        octal(&mut header[136..148], 0); // mtime: reproducible images
        header[156] = type_flag;
        header[157..157 + link.len()].copy_from_slice(link.as_bytes());
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        // The checksum is computed with its own field as spaces.
        header[148..156].copy_from_slice(b"        ");
        let sum: u64 = header.iter().map(|b| u64::from(*b)).sum();
        octal(&mut header[148..155], sum);
        header[155] = b' ';
        self.out.extend_from_slice(&header);
        self.out.extend_from_slice(data);
        let pad = (BLOCK - data.len() % BLOCK) % BLOCK;
        self.out.extend(std::iter::repeat_n(0u8, pad));
        Ok(())
    }

    fn finish(mut self) -> Vec<u8> {
        self.out.extend(std::iter::repeat_n(0u8, 2 * BLOCK));
        self.out
    }
}

/// Writes `value` as zero-padded octal filling all but the last byte (a NUL).
fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    field[..width].copy_from_slice(&text.as_bytes()[text.len() - width..]);
    field[width] = 0;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn image() -> Image {
        Image {
            tag: "local/t:1".into(),
            entries: vec![
                Entry::Dir {
                    path: "bin".into(),
                    mode: 0o755,
                },
                Entry::File {
                    path: "bin/x".into(),
                    mode: 0o755,
                    data: vec![7; 600],
                },
                Entry::Symlink {
                    path: "bin/y".into(),
                    target: "x".into(),
                },
            ],
            entrypoint: Some(vec!["/bin/x".into()]),
            cmd: None,
        }
    }

    /// The entries of a tar archive as (name, type flag, size, link, data).
    fn parse(tar: &[u8]) -> Vec<(String, u8, usize, String, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at + BLOCK <= tar.len() && tar[at] != 0 {
            let h = &tar[at..at + BLOCK];
            let text = |r: std::ops::Range<usize>| {
                String::from_utf8(h[r].iter().copied().take_while(|b| *b != 0).collect()).unwrap()
            };
            let size = usize::from_str_radix(text(124..136).trim(), 8).unwrap();
            let stored: u64 = u64::from_str_radix(text(148..155).trim(), 8).unwrap();
            let mut blank = h.to_vec();
            blank[148..156].copy_from_slice(b"        ");
            assert_eq!(stored, blank.iter().map(|b| u64::from(*b)).sum::<u64>());
            assert_eq!(&h[257..263], b"ustar\0");
            let data = tar[at + BLOCK..at + BLOCK + size].to_vec();
            out.push((text(0..100), h[156], size, text(157..257), data));
            at += BLOCK + size.div_ceil(BLOCK) * BLOCK;
        }
        out
    }

    #[test]
    fn layer_entries_round_trip_with_valid_checksums() {
        let mut w = TarWriter::default();
        for e in &image().entries {
            w.entry(e).unwrap();
        }
        let tar = w.finish();
        assert_eq!(tar.len() % BLOCK, 0);
        let entries = parse(&tar);
        assert_eq!(entries.len(), 3);
        assert_eq!((entries[0].0.as_str(), entries[0].1), ("bin", b'5'));
        assert_eq!((entries[1].0.as_str(), entries[1].2), ("bin/x", 600));
        assert_eq!(entries[1].4, vec![7; 600]);
        assert_eq!(
            (entries[2].1, entries[2].3.as_str()),
            (b'2', "x"),
            "a symlink to x"
        );
    }

    #[test]
    fn archive_manifest_names_the_config_and_layer_by_digest() {
        let archive = image().docker_archive().unwrap();
        let files = parse(&archive);
        let manifest: serde_json::Value =
            serde_json::from_slice(&files.iter().find(|f| f.0 == "manifest.json").unwrap().4)
                .unwrap();
        assert_eq!(manifest[0]["RepoTags"], json!(["local/t:1"]));
        let layer_name = manifest[0]["Layers"][0].as_str().unwrap();
        let layer = &files.iter().find(|f| f.0 == layer_name).unwrap().4;
        assert_eq!(layer_name, format!("{}/layer.tar", sha256_hex(layer)));
        let config_name = manifest[0]["Config"].as_str().unwrap();
        let config: serde_json::Value =
            serde_json::from_slice(&files.iter().find(|f| f.0 == config_name).unwrap().4).unwrap();
        assert_eq!(
            config["rootfs"]["diff_ids"][0],
            format!("sha256:{}", sha256_hex(layer))
        );
        assert_eq!(config["config"]["Entrypoint"], json!(["/bin/x"]));
    }

    #[test]
    fn ldd_output_names_libraries_and_loader_but_not_the_vdso() {
        let ldd = "\tlinux-vdso.so.1 (0x00007fdebc500000)\n\
                   \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007fdebc4cf000)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007fdeb941e000)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007fdebc502000)\n";
        assert_eq!(
            shared_libraries(ldd),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert!(shared_libraries("\tnot a dynamic executable\n").is_empty());
    }

    #[test]
    fn a_dynamic_binary_brings_its_libraries_and_their_directories() {
        let image = Image::with_shared_libraries("local/ls:1", Path::new("/bin/ls"), "ls").unwrap();
        let paths: Vec<&str> = image
            .entries
            .iter()
            .map(|e| match e {
                Entry::Dir { path, .. }
                | Entry::File { path, .. }
                | Entry::Symlink { path, .. } => path.as_str(),
            })
            .collect();
        let libc = paths
            .iter()
            .position(|p| p.starts_with("lib") && p.ends_with("/libc.so.6"))
            .expect("libc in the image");
        let dir = paths
            .iter()
            .position(|p| *p == Path::new(paths[libc]).parent().unwrap().to_str().unwrap())
            .expect("libc's directory in the image");
        assert!(dir < libc, "a directory comes before its files: {paths:?}");
        assert!(
            paths.iter().any(|p| p.starts_with("lib64/ld-linux")),
            "{paths:?}"
        );
        assert_eq!(image.entrypoint, Some(vec!["/ls".to_owned()]));
    }

    #[test]
    fn a_path_too_long_for_ustar_is_an_error() {
        let mut w = TarWriter::default();
        let err = w
            .entry(&Entry::Dir {
                path: "d".repeat(100),
                mode: 0o755,
            })
            .unwrap_err();
        assert!(err.to_string().contains("too long"), "{err}");
    }
}
