#!/usr/bin/env python3
"""SPDX 2.3 SBOMs of a release (make release), from `cargo metadata` and the image layout; no network.

  sbom.py crates --out F                      the crate graph of the manager: every crate the two release targets
                                              build it from (normal and build dependencies; not dev-dependencies),
                                              with Cargo.lock's checksums and the dependency edges
  sbom.py image --layout DIR --arch A --triple T --binary B --image REF --out F
                                              the image of one architecture in the OCI index at DIR: the image (its
                                              manifest digest), the one file it holds (/manager) and the crates that
                                              binary is compiled from for triple T

The documents are reproducible: `created` is the commit's time (SOURCE_DATE_EPOCH when set), and the namespace is
derived from what the document describes.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import uuid

TARGETS = ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"]
ROOT_BIN = "manager"
NAMESPACE_BASE = "https://github.com/capi-ipam-in-cluster/capi-ipam-in-cluster/releases"
TOOL = "Tool: capi-ipam-in-cluster-tests/tools/sbom.py"


def fail(message):
    print(f"sbom: {message}", file=sys.stderr)
    sys.exit(1)


def cargo_metadata():
    args = ["cargo", "metadata", "--format-version", "1", "--locked"]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def lock_checksums():
    """name@version -> the .crate's SHA-256 from Cargo.lock (registry crates only)."""
    checksums, current = {}, {}
    with open("Cargo.lock", encoding="utf-8") as lock:
        for line in lock:
            line = line.strip()
            if line == "[[package]]":
                current = {}
            match = re.fullmatch(r'(name|version|checksum) = "(.*)"', line)
            if match:
                current[match.group(1)] = match.group(2)
                if match.group(1) == "checksum":
                    checksums[f"{current['name']}@{current['version']}"] = match.group(2)
    return checksums


def spdx_id(kind, name, version=""):
    raw = f"{kind}-{name}-{version}" if version else f"{kind}-{name}"
    return "SPDXRef-" + re.sub(r"[^A-Za-z0-9.-]", "-", raw)


def license_expression(package):
    """Cargo's license field as an SPDX expression (the old `/` separator is OR); NOASSERTION when absent."""
    text = package.get("license")
    if not text:
        return "NOASSERTION"
    return " OR ".join(part.strip() for part in text.split("/"))


def manager_graph(metadata, triples):
    """The crates the manager binary is built from for `triples`: (root id, {id: package}, [(from, to, kind)]).

    From `cargo tree`, which resolves features per target and leaves dev-dependencies out (the resolve of `cargo
    metadata` unifies the features of every target and of the tests' dependencies: it names crates the manager never
    links)."""
    roots = [
        p
        for p in metadata["packages"]
        if p["id"] in metadata["workspace_members"]
        and any(t["name"] == ROOT_BIN and "bin" in t["kind"] for t in p["targets"])
    ]
    if len(roots) != 1:
        fail(f"expected one workspace package with the {ROOT_BIN} binary, found {[p['id'] for p in roots]}")
    by_name = {(p["name"], p["version"]): p for p in metadata["packages"]}
    seen, edges = {roots[0]["id"]}, set()
    for triple in triples:
        args = ["cargo", "tree", "--locked", "-e", "normal,build", "--prefix", "indent", "--format", "{p}"]
        tree = subprocess.run(args + ["--target", triple, "-p", roots[0]["name"]],
                              check=True, capture_output=True, text=True).stdout
        stack = []  # (column, package id, whether its children from here on are build dependencies)
        for line in tree.splitlines():
            column = next((i for i, c in enumerate(line) if c.isalnum() or c == "["), None)
            if column is None:
                continue
            text = line[column:]
            if text == "[build-dependencies]":
                stack = [(c, i, build or c == column) for c, i, build in stack]
                continue
            name, version = text.split()[:2]
            package = by_name.get((name, version.lstrip("v")))
            if package is None:
                fail(f"cargo tree names {name} {version}, which cargo metadata does not")
            while stack and stack[-1][0] >= column:
                stack.pop()
            if stack:
                edges.add((stack[-1][1], package["id"], "build" if stack[-1][2] else "normal"))
            seen.add(package["id"])
            stack.append((column, package["id"], False))
    packages = {p["id"]: p for p in metadata["packages"]}
    return roots[0]["id"], {i: packages[i] for i in seen}, sorted(edges)


def crate_package(package, checksums, root):
    entry = {
        "SPDXID": spdx_id("crate", package["name"], package["version"]),
        "name": package["name"],
        "versionInfo": package["version"],
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": False,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": license_expression(package),
        "copyrightText": "NOASSERTION",
        "primaryPackagePurpose": "APPLICATION" if package["id"] == root else "LIBRARY",
    }
    if package.get("description"):
        entry["summary"] = " ".join(package["description"].split())
    checksum = checksums.get(f"{package['name']}@{package['version']}")
    source = package.get("source") or ""
    if source.startswith("registry+"):
        entry["downloadLocation"] = (
            f"https://crates.io/api/v1/crates/{package['name']}/{package['version']}/download"
        )
        entry["externalRefs"] = [
            {
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": f"pkg:cargo/{package['name']}@{package['version']}",
            }
        ]
    if checksum:
        entry["checksums"] = [{"algorithm": "SHA256", "checksumValue": checksum}]
    return entry


def crate_relationships(edges, packages):
    out = []
    for src, dst, kind in edges:
        a, b = packages[src], packages[dst]
        a_id, b_id = spdx_id("crate", a["name"], a["version"]), spdx_id("crate", b["name"], b["version"])
        if kind == "normal":
            out.append({"spdxElementId": a_id, "relationshipType": "DEPENDS_ON", "relatedSpdxElement": b_id})
        else:
            out.append({"spdxElementId": b_id, "relationshipType": "BUILD_DEPENDENCY_OF", "relatedSpdxElement": a_id})
    return out


def created():
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        result = subprocess.run(["git", "log", "-1", "--format=%ct"], capture_output=True, text=True)
        epoch = result.stdout.strip() or "0"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(epoch)))


def document(name, described, packages, relationships, files=None):
    body = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": name,
        "creationInfo": {"created": created(), "creators": [TOOL]},
        "documentDescribes": [described],
        "packages": packages,
        "relationships": relationships,
    }
    if files:
        body["files"] = files
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    body["documentNamespace"] = f"{NAMESPACE_BASE}/{name}-{uuid.uuid5(uuid.NAMESPACE_URL, digest)}"
    return body


def write(path, body):
    with open(path, "w", encoding="utf-8") as out:
        json.dump(body, out, indent=2, sort_keys=False)
        out.write("\n")


def crates_sbom(args):
    root, packages, edges = manager_graph(cargo_metadata(), TARGETS)
    checksums = lock_checksums()
    version = packages[root]["version"]
    entries = [crate_package(p, checksums, root) for _, p in sorted(packages.items())]
    root_id = spdx_id("crate", packages[root]["name"], version)
    write(args.out, document(f"capi-ipam-in-cluster-v{version}-crates", root_id, entries,
                             crate_relationships(edges, packages)))


def image_digest(layout, arch):
    with open(os.path.join(layout, "index.json"), encoding="utf-8") as f:
        top = json.load(f)["manifests"]
    if len(top) != 1:
        fail(f"{layout}: expected one image index, found {len(top)} entries")
    algorithm, hexdigest = top[0]["digest"].split(":")
    with open(os.path.join(layout, "blobs", algorithm, hexdigest), encoding="utf-8") as f:
        index = json.load(f)
    found = [m for m in index["manifests"] if m.get("platform", {}).get("architecture") == arch]
    if len(found) != 1:
        fail(f"{layout}: expected one linux/{arch} image in the index, found {len(found)}")
    return found[0]["digest"]


def image_sbom(args):
    root, packages, edges = manager_graph(cargo_metadata(), [args.triple])
    checksums = lock_checksums()
    version = packages[root]["version"]
    digest = image_digest(args.layout, args.arch)
    repository, _, tag = args.image.rpartition(":")
    with open(args.binary, "rb") as f:
        binary = f.read()
    image_id = f"SPDXRef-image-linux-{args.arch}"
    image = {
        "SPDXID": image_id,
        "name": repository.rsplit("/", 1)[-1],
        "versionInfo": tag,
        "downloadLocation": "NOASSERTION",
        # Its one file is listed: the verification code is the SHA-1 of the sorted SHA-1s of its files (SPDX 2.3, 7.9).
        "filesAnalyzed": True,
        "packageVerificationCode": {"packageVerificationCodeValue": hashlib.sha1(
            hashlib.sha1(binary).hexdigest().encode()).hexdigest()},
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": license_expression(packages[root]),
        "licenseInfoFromFiles": ["NOASSERTION"],
        "copyrightText": "NOASSERTION",
        "primaryPackagePurpose": "CONTAINER",
        "checksums": [{"algorithm": "SHA256", "checksumValue": digest.split(":", 1)[1]}],
        "externalRefs": [
            {
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": f"pkg:oci/{repository.rsplit('/', 1)[-1]}@{digest.replace(':', '%3A')}"
                f"?arch={args.arch}&repository_url={repository}&tag={tag}",
            }
        ],
    }
    manager = {
        "SPDXID": "SPDXRef-File-manager",
        "fileName": "./manager",
        "fileTypes": ["BINARY"],
        "checksums": [
            {"algorithm": "SHA1", "checksumValue": hashlib.sha1(binary).hexdigest()},
            {"algorithm": "SHA256", "checksumValue": hashlib.sha256(binary).hexdigest()},
        ],
        "licenseConcluded": "NOASSERTION",
        "licenseInfoInFiles": ["NOASSERTION"],
        "copyrightText": "NOASSERTION",
    }
    root_id = spdx_id("crate", packages[root]["name"], version)
    relationships = [
        {"spdxElementId": image_id, "relationshipType": "CONTAINS", "relatedSpdxElement": "SPDXRef-File-manager"},
        {"spdxElementId": "SPDXRef-File-manager", "relationshipType": "GENERATED_FROM", "relatedSpdxElement": root_id},
    ] + crate_relationships(edges, packages)
    entries = [image] + [crate_package(p, checksums, root) for _, p in sorted(packages.items())]
    write(args.out, document(f"capi-ipam-in-cluster-v{version}-image-linux-{args.arch}", image_id, entries,
                             relationships, [manager]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    crates = sub.add_parser("crates")
    crates.add_argument("--out", required=True)
    image = sub.add_parser("image")
    for flag in ["--layout", "--arch", "--triple", "--binary", "--image", "--out"]:
        image.add_argument(flag, required=True)
    args = parser.parse_args()
    crates_sbom(args) if args.what == "crates" else image_sbom(args)


if __name__ == "__main__":
    main()
