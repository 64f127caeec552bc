// oci-image packs the statically linked manager into a minimal OCI image without a container engine or a base image:
// one layer holding /manager only, run as 65532:65532 with /manager as entrypoint. It writes an OCI image layout
// (crane push, skopeo, podman load) and a docker tarball (docker load) for the same image. Layer times and the
// config's creation time are fixed, so the same binary always gives the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
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

func main() {
	binary := flag.String("binary", "", "the statically linked manager")
	tag := flag.String("tag", "", "the image reference the tarball names, e.g. ghcr.io/org/manager:v2.0.0")
	layoutDir := flag.String("layout", "", "write an OCI image layout to this folder (replaced)")
	tarPath := flag.String("tarball", "", "write a docker tarball to this file")
	arch := flag.String("arch", "amd64", "the binary's architecture")
	l := labels{}
	flag.Var(l, "label", "an image label key=value (repeatable)")
	flag.Parse()
	if *binary == "" || *tag == "" || *layoutDir == "" || *tarPath == "" {
		log.Fatal("oci-image: --binary, --tag, --layout and --tarball are required")
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		log.Fatalf("oci-image: --tag %q: %v", *tag, err)
	}
	content, err := os.ReadFile(*binary)
	if err != nil {
		log.Fatalf("oci-image: --binary: %v", err)
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
	cfg.OS, cfg.Architecture = "linux", *arch
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

	must(os.RemoveAll(*layoutDir))
	p, err := layout.Write(*layoutDir, empty.Index)
	must(err)
	// As `docker save` names an image in an OCI layout: containerd reads the full name, the OCI spec the tag.
	must(p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref.String(),
		"org.opencontainers.image.ref.name": ref.TagStr(),
	})))
	must(tarball.WriteToFile(*tarPath, ref, img))
	digest, err := img.Digest()
	must(err)
	fmt.Println(digest)
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
