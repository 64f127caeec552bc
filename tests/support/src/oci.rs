//! OCI image layouts and registries, as the image and release tests take them apart: every blob read is checked
//! against its digest, and crane's registry on 127.0.0.1 stands in for a real one.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::manager::{free_port, http_get};
use crate::release::{ok, tool_dir};

pub fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A blob of the OCI layout, checked against its digest.
pub fn blob(layout: &Path, digest: &str) -> Vec<u8> {
    let hex = digest.strip_prefix("sha256:").unwrap_or_else(|| panic!("not a sha256 digest: {digest}"));
    let data = std::fs::read(layout.join("blobs/sha256").join(hex)).expect("blob");
    assert_eq!(sha256_hex(&data), hex, "blob {digest} does not match its digest");
    data
}

/// The blob a descriptor names, checked against its digest and size.
pub fn described_blob(layout: &Path, descriptor: &Value) -> Vec<u8> {
    let data = blob(layout, descriptor["digest"].as_str().expect("digest"));
    assert_eq!(data.len() as u64, descriptor["size"].as_u64().expect("size"), "size of {descriptor}");
    data
}

pub fn json_blob(layout: &Path, descriptor: &Value) -> Value {
    serde_json::from_slice(&described_blob(layout, descriptor)).expect("JSON blob")
}

/// The layout's `index.json`, after its `oci-layout` marker.
pub fn layout_index(layout: &Path) -> Value {
    let marker: Value = serde_json::from_slice(&std::fs::read(layout.join("oci-layout")).expect("oci-layout")).unwrap();
    assert_eq!(marker["imageLayoutVersion"], "1.0.0");
    serde_json::from_slice(&std::fs::read(layout.join("index.json")).expect("index.json")).expect("index.json")
}

pub fn run_with_stdin(program: &str, args: &[&str], input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect(program);
    writer.join().expect("writer").expect("writing stdin");
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// A 64-bit little-endian ELF executable's machine (`e_machine`: 62 x86-64, 183 AArch64).
pub fn elf_machine(elf: &[u8]) -> u16 {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "not a 64-bit ELF file");
    u16::from_le_bytes([elf[0x12], elf[0x13]])
}

/// Whether an ELF executable asks for a dynamic loader (a PT_INTERP program header).
pub fn needs_a_loader(elf: &[u8]) -> bool {
    elf_machine(elf);
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().expect("8 bytes")) as usize;
    let (entry_size, count) = (u16_at(0x36), u16_at(0x38));
    (0..count).any(|i| {
        let at = phoff + i * entry_size;
        u32::from_le_bytes(elf[at..at + 4].try_into().expect("4 bytes")) == 3
    })
}

/// crane's registry on 127.0.0.1 (in memory), killed when dropped.
pub struct Registry {
    child: Child,
    pub port: u16,
}

impl Registry {
    pub fn start() -> Registry {
        let port = free_port();
        let child = Command::new(tool_dir("image").join("crane"))
            .args(["registry", "serve", "--address", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("crane registry serve");
        let registry = Registry { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while http_get(port, "/v2/").map(|(code, _)| code) != Some(200) {
            assert!(Instant::now() < deadline, "the registry does not answer on 127.0.0.1:{port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    /// `<host:port>/<repository>` in this registry.
    pub fn reference(&self, repository: &str) -> String {
        format!("127.0.0.1:{}/{repository}", self.port)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// crane with these arguments; panics with its output when it fails.
pub fn crane(args: &[&str]) -> String {
    ok(Command::new(tool_dir("image").join("crane")).args(args).output().expect("crane"), &format!("crane {args:?}"))
}
