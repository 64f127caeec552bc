#!/usr/bin/env python3
"""Installs CRDs and webhook configurations into a development cluster, pointing the API server at a manager that
runs outside the cluster (make run, integration tests), as envtest does: every Service reference becomes
`<url>/<path>` with the CA bundle, and multi-version CRDs get the conversion webhook. By default it installs ours;
control-plane.sh installs the Cluster API core manager's the same way (--crds, --webhooks, --name-prefix, --label).
It takes the wiring over from an in-cluster install (clusterctl init, Helm) whose Services no API server here can
reach: their conversion settings are replaced and their webhook configurations for the same paths deleted.

Why Python: the same installer runs from shell before anything in Rust is built (control-plane.sh installs the
Cluster API manager's wiring with it; make run installs ours), and the Rust tests call it so that they register
webhooks exactly as make run does. Python 3 is on every machine the tools run on (tests/tools/deps.sh).

usage: dev-install.py --kubectl KUBECTL --kubeconfig FILE --url https://127.0.0.1:PORT --ca CA.crt
                      [--crds DIR] [--webhooks FILE] [--name-prefix PREFIX] [--label KEY=VALUE ...]
"""
import argparse
import base64
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def kubectl(args, kubeconfig, stdin=None):
    cmd = [ARGS.kubectl, "--kubeconfig", kubeconfig, *args]
    out = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dev-install: {' '.join(cmd[3:])} failed: {out.stderr.strip()}")
    return out.stdout


def objects(path):
    """The objects of a YAML file, as JSON, via kubectl's own YAML parser."""
    text = kubectl(["create", "--dry-run=client", "-o", "json", "-f", str(path)], ARGS.kubeconfig)
    decoder, pos, out = json.JSONDecoder(), 0, []
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        obj, pos = decoder.raw_decode(text, pos)
        out.extend(obj.get("items", [obj]))
    return out


def take_over(out):
    """Server-side apply keeps fields another manager set, so a Service reference left by an in-cluster install would
    sit beside our URL (invalid): replace those conversions whole, and delete the webhook configurations of the
    install that serve our paths."""
    wanted = {o["metadata"]["name"]: o for o in out if o["kind"] == "CustomResourceDefinition"}
    live = json.loads(kubectl(["get", "crd", "-o", "json"], ARGS.kubeconfig))["items"]
    for crd in live:
        name = crd["metadata"]["name"]
        service = crd["spec"].get("conversion", {}).get("webhook", {}).get("clientConfig", {}).get("service")
        if name in wanted and service and "conversion" in wanted[name]["spec"]:
            patch = [{"op": "replace", "path": "/spec/conversion", "value": wanted[name]["spec"]["conversion"]}]
            kubectl(["patch", "crd", name, "--type=json", "-p", json.dumps(patch)], ARGS.kubeconfig)
    paths = {h["clientConfig"]["url"].removeprefix(ARGS.url) for o in out if "webhooks" in o for h in o["webhooks"]}
    for kind in ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"]:
        for cfg in json.loads(kubectl(["get", kind, "-o", "json"], ARGS.kubeconfig))["items"]:
            served = {h["clientConfig"].get("service", {}).get("path") for h in cfg.get("webhooks") or []}
            if served & paths:
                kubectl(["delete", kind, cfg["metadata"]["name"]], ARGS.kubeconfig)


def main():
    ca = base64.b64encode(pathlib.Path(ARGS.ca).read_bytes()).decode()
    out = []
    labels = dict(kv.split("=", 1) for kv in ARGS.label)
    for path in sorted(pathlib.Path(ARGS.crds).glob("*.yaml")):
        for crd in objects(path):
            if labels:
                crd["metadata"].setdefault("labels", {}).update(labels)
            if len(crd["spec"]["versions"]) > 1:
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "conversionReviewVersions": ["v1"],
                        "clientConfig": {"url": f"{ARGS.url}/convert", "caBundle": ca},
                    },
                }
            out.append(crd)
    for cfg in objects(ARGS.webhooks):
        cfg["metadata"]["name"] = ARGS.name_prefix + cfg["metadata"]["name"]
        for hook in cfg["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{ARGS.url}{path}", "caBundle": ca}
        out.append(cfg)
    take_over(out)
    kubectl(["apply", "--server-side", "--force-conflicts", "--field-manager=dev-install", "-f", "-"], ARGS.kubeconfig,
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": out}))
    names = [f"customresourcedefinition/{o['metadata']['name']}" for o in out if o["kind"] == "CustomResourceDefinition"]
    kubectl(["wait", "--for=condition=Established", "--timeout=60s", *names], ARGS.kubeconfig)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--kubectl", required=True)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--crds", default=str(ROOT / "config/crd/bases"))
    p.add_argument("--webhooks", default=str(ROOT / "config/webhook/manifests.yaml"))
    p.add_argument("--name-prefix", default="capi-ipam-in-cluster-")
    p.add_argument("--label", action="append", default=[], help="a label for every CRD, KEY=VALUE")
    ARGS = p.parse_args()
    main()
