// oci-image packs the statically linked manager into a minimal OCI image without a container engine or a base image:
// one layer holding /manager only, run as 65532:65532 with /manager as entrypoint. It writes an OCI image layout
// (crane push, skopeo, podman load) and a docker tarball (docker load) for the same image. Layer times and the
// config's creation time are fixed, so the same binary always gives the same image digest.
//
// With --platform ARCH=BINARY given once per architecture, the layout holds one image index of those images (what a
// registry serves to amd64 and arm64 nodes alike), and --tarball names one docker tarball per architecture.
//
// `oci-image artifact` writes a release's files as an OCI artifact instead: one layer per file, titled with its base
// name (org.opencontainers.image.title), as the Cluster API Operator's fetchConfig.oci reads a provider release.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type labels map[string]string

func (l labels) String() string { return fmt.Sprint(map[string]string(l)) }
func (l labels) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("label %q: want key=value", kv)
	}
	l[k] = v
	return nil
}

type platforms map[string]string

func (p platforms) String() string { return fmt.Sprint(map[string]string(p)) }
func (p platforms) Set(kv string) error {
	arch, binary, ok := strings.Cut(kv, "=")
	if !ok || arch == "" || binary == "" {
		return fmt.Errorf("platform %q: want ARCH=BINARY, e.g. arm64=target/aarch64-unknown-linux-gnu/release/manager", kv)
	}
	if _, twice := p[arch]; twice {
		return fmt.Errorf("platform %q: %s given twice", kv, arch)
	}
	p[arch] = binary
	return nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "artifact" {
		artifactMain(os.Args[2:])
		return
	}
	binary := flag.String("binary", "", "the statically linked manager (one architecture; or --platform)")
	tag := flag.String("tag", "", "the image reference the tarball names, e.g. ghcr.io/org/manager:v2.0.0")
	layoutDir := flag.String("layout", "", "write an OCI image layout to this folder (replaced)")
	tarPath := flag.String("tarball", "", "write a docker tarball to this file ({arch} in it: one per --platform)")
	arch := flag.String("arch", "amd64", "the --binary's architecture")
	l := labels{}
	flag.Var(l, "label", "an image label key=value (repeatable)")
	p := platforms{}
	flag.Var(p, "platform", "ARCH=BINARY, once per architecture of an image index (instead of --binary)")
	flag.Parse()
	if (*binary == "") == (len(p) == 0) || *tag == "" || *layoutDir == "" || *tarPath == "" {
		log.Fatal("oci-image: --tag, --layout, --tarball and either --binary or --platform are required")
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		log.Fatalf("oci-image: --tag %q: %v", *tag, err)
	}
	if len(p) > 0 && !strings.Contains(*tarPath, "{arch}") {
		log.Fatalf("oci-image: --tarball %q: with --platform it needs {arch} (one docker tarball per architecture)", *tarPath)
	}
	annotations := layout.WithAnnotations(map[string]string{
		// As `docker save` names an image in an OCI layout: containerd reads the full name, the OCI spec the tag.
		"io.containerd.image.name":          ref.String(),
		"org.opencontainers.image.ref.name": ref.TagStr(),
	})
	must(os.RemoveAll(*layoutDir))
	out, err := layout.Write(*layoutDir, empty.Index)
	must(err)

	if *binary != "" {
		img := managerImage(*binary, *arch, l)
		must(out.AppendImage(img, annotations))
		must(tarball.WriteToFile(*tarPath, ref, img))
		digest, err := img.Digest()
		must(err)
		fmt.Println(digest)
		return
	}
	archs := make([]string, 0, len(p))
	for a := range p {
		archs = append(archs, a)
	}
	sort.Strings(archs)
	index := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, a := range archs {
		img := managerImage(p[a], a, l)
		must(tarball.WriteToFile(strings.ReplaceAll(*tarPath, "{arch}", a), ref, img))
		platform := platformOf(a)
		index = mutate.AppendManifests(index, mutate.IndexAddendum{
			Add: img, Descriptor: v1.Descriptor{Platform: &platform},
		})
		digest, err := img.Digest()
		must(err)
		fmt.Fprintf(os.Stderr, "oci-image: linux/%s %s\n", a, digest)
	}
	must(out.AppendIndex(index, annotations))
	digest, err := index.Digest()
	must(err)
	fmt.Println(digest)
}

// platformOf is the OCI platform of a Linux architecture; arm64 carries the variant registries and engines expect.
func platformOf(arch string) v1.Platform {
	platform := v1.Platform{OS: "linux", Architecture: arch}
	if arch == "arm64" {
		platform.Variant = "v8"
	}
	return platform
}

// managerImage is the one-layer image of a manager binary for one architecture.
func managerImage(binary, arch string, l labels) v1.Image {
	content, err := os.ReadFile(binary)
	if err != nil {
		log.Fatalf("oci-image: binary for %s: %v", arch, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar(content))), nil
	}, tarball.WithMediaType(types.OCILayer))
	must(err)
	img, err := mutate.AppendLayers(mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1), layer)
	must(err)
	cfg, err := img.ConfigFile()
	must(err)
	cfg = cfg.DeepCopy()
	platform := platformOf(arch)
	cfg.OS, cfg.Architecture, cfg.Variant = platform.OS, platform.Architecture, platform.Variant
	epoch := v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Created = epoch
	cfg.History = []v1.History{{Created: epoch, CreatedBy: "oci-image: /manager (tests/tools/image.sh)"}}
	cfg.Config.Entrypoint = []string{"/manager"}
	cfg.Config.User = "65532:65532"
	cfg.Config.WorkingDir = "/"
	cfg.Config.Labels = l
	cfg.Config.ExposedPorts = map[string]struct{}{"9443/tcp": {}, "8443/tcp": {}, "8081/tcp": {}}
	img, err = mutate.ConfigFile(img, cfg)
	must(err)
	return img
}

// artifactMain: oci-image artifact --layout DIR --tag REF [--artifact-type TYPE] FILE...
func artifactMain(args []string) {
	flags := flag.NewFlagSet("oci-image artifact", flag.ExitOnError)
	layoutDir := flags.String("layout", "", "write the artifact as an OCI image layout to this folder (replaced)")
	tag := flags.String("tag", "", "the reference the artifact is pushed as, e.g. ghcr.io/org/ipam-in-cluster:v2.0.0")
	// No registry or tool reads this type; the Cluster API Operator reads the layers by their titles.
	artifactType := flags.String("artifact-type", "application/vnd.cluster.x-k8s.io.provider.release.v1",
		"the manifest's artifactType")
	must(flags.Parse(args))
	if *layoutDir == "" || *tag == "" || *artifactType == "" || flags.NArg() == 0 {
		log.Fatal("oci-image artifact: --layout, --tag and at least one file are required")
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		log.Fatalf("oci-image artifact: --tag %q: %v", *tag, err)
	}
	must(os.RemoveAll(*layoutDir))
	out, err := layout.Write(*layoutDir, empty.Index)
	must(err)
	// The OCI 1.1 empty config: an artifact that is no image says what it is in artifactType alone.
	manifest := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        writeBlob(out, []byte("{}"), "application/vnd.oci.empty.v1+json"),
		Layers:        []v1.Descriptor{},
		ArtifactType:  *artifactType,
	}
	for _, file := range flags.Args() {
		content, err := os.ReadFile(file)
		if err != nil {
			log.Fatalf("oci-image artifact: %v", err)
		}
		layer := writeBlob(out, content, "application/yaml")
		layer.Annotations = map[string]string{"org.opencontainers.image.title": filepath.Base(file)}
		manifest.Layers = append(manifest.Layers, layer)
	}
	raw, err := json.Marshal(manifest)
	must(err)
	descriptor := writeBlob(out, raw, types.OCIManifestSchema1)
	descriptor.ArtifactType = *artifactType
	descriptor.Annotations = map[string]string{"org.opencontainers.image.ref.name": ref.TagStr()}
	must(out.AppendDescriptor(descriptor))
	fmt.Println(descriptor.Digest)
}

// writeBlob stores content in the layout and returns its descriptor.
func writeBlob(out layout.Path, content []byte, mediaType types.MediaType) v1.Descriptor {
	digest, size, err := v1.SHA256(bytes.NewReader(content))
	must(err)
	must(out.WriteBlob(digest, io.NopCloser(bytes.NewReader(content))))
	return v1.Descriptor{MediaType: mediaType, Size: size, Digest: digest}
}

// layerTar is the layer: /manager, owned by root and executable by all, at a fixed time.
func layerTar(binary []byte) []byte {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	must(w.WriteHeader(&tar.Header{
		Name: "manager", Mode: 0o755, Size: int64(len(binary)), Typeflag: tar.TypeReg,
		ModTime: time.Unix(0, 0), Format: tar.FormatPAX,
	}))
	_, err := w.Write(binary)
	must(err)
	must(w.Close())
	return buf.Bytes()
}

func must(err error) {
	if err != nil {
		log.Fatalf("oci-image: %v", err)
	}
}
