// Command vcsim is vCenter's stand-in for the CAPV consumer test: govmomi's simulator (VPX model) over TLS on
// 127.0.0.1, with the REST endpoints CAPV also talks to (tags, cluster modules), a template CAPV can clone, a
// ready-file describing it all, and a small HTTP endpoint to read what CAPV wrote into a VM's guestinfo.metadata.
//
//	vcsim -listen 127.0.0.1:0 -http 127.0.0.1:0 -ready-file DIR/vcsim.json
package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	// Registered into the simulator's endpoints: CAPV opens a REST session (tags) and may use cluster modules.
	_ "github.com/vmware/govmomi/vapi/cluster/simulator"
	_ "github.com/vmware/govmomi/vapi/simulator"
)

// ready is what the ready-file holds: everything a test needs to point a VSphereCluster / VSphereMachine at us.
type ready struct {
	URL           string `json:"url"`    // https://127.0.0.1:PORT/sdk
	Server        string `json:"server"` // 127.0.0.1:PORT, what VSphereCluster.spec.server takes (host or host:port)
	Username      string `json:"username"`
	Password      string `json:"password"`
	Thumbprint    string `json:"thumbprint"` // SHA-1, the SDK's format; govmomi accepts it or the SHA-256 one
	Thumbprint256 string `json:"thumbprint256"`
	// GET {metadataURL}/metadata/{vm name}: 200 with the decoded guestinfo.metadata (YAML), 204 while the VM has
	// none yet (CAPV writes it once every IPAddressClaim is bound), 404 when there is no such VM.
	MetadataURL  string `json:"metadataURL"`
	Datacenter   string `json:"datacenter"`
	Datastore    string `json:"datastore"`
	Network      string `json:"network"`
	ResourcePool string `json:"resourcePool"`
	Folder       string `json:"folder"`
	Template     string `json:"template"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "host:port of the simulated vCenter (port 0: a free one)")
	httpAddr := flag.String("http", "127.0.0.1:0", "host:port of the metadata endpoint (port 0: a free one)")
	readyFile := flag.String("ready-file", "", "where to write the JSON description once serving")
	templateName := flag.String("template", "ubuntu-template", "name of the VM template to create for CAPV to clone")
	assignIP := flag.Bool("assign-ip", true, "make powered-on VMs report the first address of their guestinfo.metadata, as VMware Tools would")
	flag.Parse()

	model := simulator.VPX()
	if err := model.Create(); err != nil {
		log.Fatalf("vcsim: creating the model: %v", err)
	}
	defer model.Remove()
	model.Service.Listen = &url.URL{Host: *listen}
	// An empty tls.Config: httptest's built-in certificate, valid for 127.0.0.1 and localhost; CAPV pins it by
	// thumbprint (VSphereCluster.spec.thumbprint), so no CA file is needed.
	model.Service.TLS = new(tls.Config)
	model.Service.RegisterEndpoints = true
	server := model.Service.NewServer()
	defer server.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	client, err := govmomi.NewClient(ctx, server.URL, true)
	if err != nil {
		log.Fatalf("vcsim: logging in to ourselves: %v", err)
	}
	finder := find.NewFinder(client.Client, true)
	dc, err := finder.DefaultDatacenter(ctx)
	if err != nil {
		log.Fatalf("vcsim: %v", err)
	}
	finder.SetDatacenter(dc)
	if err := createTemplate(ctx, finder, *templateName); err != nil {
		log.Fatalf("vcsim: creating the template: %v", err)
	}

	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		log.Fatalf("vcsim: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metadata/{name}", func(w http.ResponseWriter, r *http.Request) {
		md, vmFound, found, err := metadata(r.Context(), finder, r.PathValue("name"))
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		case !vmFound:
			http.Error(w, "no such VM", http.StatusNotFound)
		case !found:
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Content-Type", "application/yaml")
			_, _ = w.Write(md)
		}
	})
	go func() { _ = http.Serve(ln, mux) }()

	password, _ := server.URL.User.Password()
	cert := server.Certificate()
	r := ready{
		URL:           (&url.URL{Scheme: server.URL.Scheme, Host: server.URL.Host, Path: server.URL.Path}).String(),
		Server:        server.URL.Host,
		Username:      server.URL.User.Username(),
		Password:      password,
		Thumbprint:    soap.ThumbprintSHA1(cert),
		Thumbprint256: soap.ThumbprintSHA256(cert),
		MetadataURL:   "http://" + ln.Addr().String(),
		Datacenter:    dc.Name(),
		Datastore:     "LocalDS_0",
		Network:       "VM Network",
		ResourcePool:  "/" + dc.Name() + "/host/DC0_C0/Resources",
		Folder:        "/" + dc.Name() + "/vm",
		Template:      *templateName,
	}
	if *readyFile != "" {
		data, _ := json.MarshalIndent(r, "", "  ")
		// Written whole then renamed: a reader polling for the file never sees half of it.
		if err := os.WriteFile(*readyFile+".tmp", append(data, '\n'), 0o600); err != nil {
			log.Fatalf("vcsim: %v", err)
		}
		if err := os.Rename(*readyFile+".tmp", *readyFile); err != nil {
			log.Fatalf("vcsim: %v", err)
		}
	}
	log.Printf("vcsim: serving %s (metadata at %s)", r.URL, r.MetadataURL)

	if *assignIP {
		go assignIPs(ctx, client, finder)
	}
	<-ctx.Done()
}

// createTemplate clones the model's first VM into a powered-off template: the VPX model has VMs but no template,
// and VSphereMachine.spec.template should name a template as it would in a real vCenter.
func createTemplate(ctx context.Context, finder *find.Finder, name string) error {
	src, err := finder.VirtualMachine(ctx, "DC0_H0_VM0")
	if err != nil {
		return err
	}
	folder, err := finder.DefaultFolder(ctx)
	if err != nil {
		return err
	}
	task, err := src.Clone(ctx, folder, name, types.VirtualMachineCloneSpec{PowerOn: false})
	if err != nil {
		return err
	}
	if err := task.Wait(ctx); err != nil {
		return err
	}
	tpl, err := finder.VirtualMachine(ctx, name)
	if err != nil {
		return err
	}
	return tpl.MarkAsTemplate(ctx)
}

// metadata returns a VM's guestinfo.metadata, base64-decoded when guestinfo.metadata.encoding says so (CAPV writes
// "base64"; no other encoding is decoded), so that a test can check the addresses, prefixes and gateways CAPV took from the IPAddresses.
func metadata(ctx context.Context, finder *find.Finder, name string) (md []byte, vmFound, found bool, err error) {
	vm, err := finder.VirtualMachine(ctx, name)
	if err != nil {
		if _, ok := err.(*find.NotFoundError); ok {
			return nil, false, false, nil
		}
		return nil, false, false, err
	}
	var o mo.VirtualMachine
	if err := vm.Properties(ctx, vm.Reference(), []string{"config.extraConfig"}, &o); err != nil {
		return nil, true, false, err
	}
	md, found, err = decodeMetadata(o)
	return md, true, found, err
}

func decodeMetadata(o mo.VirtualMachine) ([]byte, bool, error) {
	if o.Config == nil {
		return nil, false, nil
	}
	var value, encoding string
	for _, b := range o.Config.ExtraConfig {
		ov := b.GetOptionValue()
		switch ov.Key {
		case "guestinfo.metadata":
			value, _ = ov.Value.(string)
		case "guestinfo.metadata.encoding":
			encoding, _ = ov.Value.(string)
		}
	}
	if value == "" {
		return nil, false, nil
	}
	if encoding == "base64" {
		data, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			return nil, false, fmt.Errorf("decoding guestinfo.metadata: %w", err)
		}
		return data, true, nil
	}
	return []byte(value), true, nil
}

// The first address/prefix of an "addresses:" list in CAPV's metadata (cloud-init network config v2); nameservers
// are listed without a prefix length, so they never match.
var firstAddress = regexp.MustCompile(`(?m)^\s*- "([0-9A-Fa-f:.]+)/\d+"`)

// assignIPs plays VMware Tools: CAPV marks a VSphereVM ready only once vCenter reports an address in guest.net,
// and the simulator reports none for VMs without a container backing. A VM that is powered on, has metadata and
// no address yet gets the metadata's first address through vcsim's "SET.guest.ipAddress" extraConfig hook.
func assignIPs(ctx context.Context, client *govmomi.Client, finder *find.Finder) {
	pc := property.DefaultCollector(client.Client)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		vms, err := finder.VirtualMachineList(ctx, "*")
		if err != nil {
			continue
		}
		refs := make([]types.ManagedObjectReference, len(vms))
		for i, vm := range vms {
			refs[i] = vm.Reference()
		}
		var objs []mo.VirtualMachine
		if err := pc.Retrieve(ctx, refs, []string{"name", "runtime.powerState", "config.extraConfig", "guest.net"}, &objs); err != nil {
			continue
		}
		for _, o := range objs {
			if o.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn || o.Guest == nil || len(o.Guest.Net) == 0 ||
				len(o.Guest.Net[0].IpAddress) > 0 {
				continue
			}
			md, found, err := decodeMetadata(o)
			if err != nil || !found {
				continue
			}
			m := firstAddress.FindSubmatch(md)
			if m == nil {
				continue
			}
			vm := object.NewVirtualMachine(client.Client, o.Reference())
			task, err := vm.Reconfigure(ctx, types.VirtualMachineConfigSpec{ExtraConfig: []types.BaseOptionValue{
				&types.OptionValue{Key: "SET.guest.ipAddress", Value: string(m[1])},
			}})
			if err == nil {
				err = task.Wait(ctx)
			}
			if err != nil {
				log.Printf("vcsim: reporting %s for %s: %v", m[1], o.Name, err)
			} else {
				log.Printf("vcsim: %s reports guest IP %s", o.Name, m[1])
			}
		}
	}
}
