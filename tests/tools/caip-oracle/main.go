// caip-oracle answers, for tests/differential.rs, what the Go provider (sigs.k8s.io/cluster-api-ipam-provider-in-cluster
// v1.1.0) itself decides about a pool: its conversion, its defaulting and validating admission webhooks, its claim
// handlers' allocation and its pool reconcilers' status. It calls the provider's own code and re-implements none of it.
//
// It is compiled inside a copy of the provider's module tree (tests/tools/k8s-bin.sh caip), because the webhooks, the
// handlers and the pool arithmetic are `internal` packages.
//
// Protocol: one JSON request per line on stdin, one JSON response per line on stdout, in order.
//
//	{"id":1,"op":"admit","operation":"CREATE|UPDATE|DELETE","object":{...},"oldObject":{...},"inUse":[...]}
//	{"id":2,"op":"allocate","object":{...v1alpha2 pool...},"inUse":[...],"steps":[{"claim":"c1"},{"release":"c1"}]}
//
// `object` carries its apiVersion and kind; a v1alpha1 object is first converted to v1alpha2 by the provider's own
// conversion (as the API server does before admission, the webhooks being registered for v1alpha2 with
// matchPolicy Equivalent). `inUse` lists the IPAddresses of the pool already in the cluster: {"name","address","prefix"}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/conversion"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/api/v1alpha1"
	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/api/v1alpha2"
	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/internal/controllers"
	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/internal/index"
	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/internal/webhooks"
)

// The namespace of namespaced pools, of claims and of IPAddresses.
const namespace = "default"

type inUse struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	Prefix  *int32 `json:"prefix,omitempty"`
}

type step struct {
	Claim   string `json:"claim,omitempty"`
	Release string `json:"release,omitempty"`
}

type request struct {
	ID        int             `json:"id"`
	Op        string          `json:"op"`
	Operation string          `json:"operation"`
	Object    json.RawMessage `json:"object"`
	OldObject json.RawMessage `json:"oldObject"`
	InUse     []inUse         `json:"inUse"`
	Steps     []step          `json:"steps"`
}

type cause struct {
	Field   string `json:"field"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type stepResult struct {
	Address string `json:"address,omitempty"`
	Prefix  *int32 `json:"prefix,omitempty"`
	Gateway string `json:"gateway,omitempty"`
	Error   string `json:"error,omitempty"`
}

type response struct {
	ID int `json:"id"`
	// The oracle could not run the request (bad input); not a verdict of the provider.
	Error string `json:"error,omitempty"`

	// admit
	Converted json.RawMessage `json:"converted,omitempty"`
	Defaulted json.RawMessage `json:"defaulted,omitempty"`
	Allowed   bool            `json:"allowed"`
	Code      int32           `json:"code,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Message   string          `json:"message,omitempty"`
	Causes    []cause         `json:"causes,omitempty"`
	Warnings  []string        `json:"warnings,omitempty"`

	// allocate
	Results []stepResult     `json:"results,omitempty"`
	Status  *json.RawMessage `json:"status,omitempty"`
}

var scheme = runtime.NewScheme()

func init() {
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, v1alpha2.AddToScheme, ipamv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
}

type poolWebhook interface {
	webhook.CustomDefaulter
	webhook.CustomValidator
}

// hubObject gives a new empty v1alpha2 object of a pool kind, and the webhook of that kind reading through c (its
// update and delete checks list IPAddresses; nil where nothing is listed).
func hubObject(kind string, c client.Reader) (client.Object, poolWebhook, error) {
	switch kind {
	case "InClusterIPPool":
		return &v1alpha2.InClusterIPPool{}, &webhooks.InClusterIPPool{Client: c}, nil
	case "GlobalInClusterIPPool":
		return &v1alpha2.GlobalInClusterIPPool{}, &webhooks.InClusterIPPool{Client: c}, nil
	case "InClusterPrefixPool":
		return &v1alpha2.InClusterPrefixPool{}, &webhooks.InClusterPrefixPool{Client: c}, nil
	case "GlobalInClusterPrefixPool":
		return &v1alpha2.GlobalInClusterPrefixPool{}, &webhooks.InClusterPrefixPool{Client: c}, nil
	}
	return nil, nil, fmt.Errorf("unknown kind %q", kind)
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// toHub converts a v1alpha1 IP pool to v1alpha2 with the provider's own ConvertTo; v1alpha2 passes unchanged.
func toHub(raw json.RawMessage) (json.RawMessage, string, bool, error) {
	var tm typeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		return nil, "", false, err
	}
	if tm.APIVersion != v1alpha1.GroupVersion.String() {
		return raw, tm.Kind, false, nil
	}
	var spoke conversion.Convertible
	switch tm.Kind {
	case "InClusterIPPool":
		spoke = &v1alpha1.InClusterIPPool{}
	case "GlobalInClusterIPPool":
		spoke = &v1alpha1.GlobalInClusterIPPool{}
	default:
		return nil, "", false, fmt.Errorf("no v1alpha1 of kind %q", tm.Kind)
	}
	if err := json.Unmarshal(raw, spoke); err != nil {
		return nil, "", false, err
	}
	hub, _, err := hubObject(tm.Kind, nil)
	if err != nil {
		return nil, "", false, err
	}
	if err := spoke.ConvertTo(hub.(conversion.Hub)); err != nil {
		return nil, "", false, err
	}
	hub.GetObjectKind().SetGroupVersionKind(v1alpha2.GroupVersion.WithKind(tm.Kind))
	out, err := json.Marshal(hub)
	return out, tm.Kind, true, err
}

// fakeCluster is a client over the pool's IPAddresses, with the field index the provider's code lists them by.
func fakeCluster(kind, poolName string, addresses []inUse, objects ...client.Object) client.Client {
	b := fake.NewClientBuilder().
		WithScheme(scheme).
		WithIndex(&ipamv1.IPAddress{}, index.IPAddressPoolRefCombinedField, index.IPAddressByCombinedPoolRef).
		WithIndex(&ipamv1.IPAddressClaim{}, index.IPAddressClaimPoolRefCombinedField, func(o client.Object) []string {
			return []string{index.IPPoolRefValue(o.(*ipamv1.IPAddressClaim).Spec.PoolRef)}
		}).
		WithStatusSubresource(&v1alpha2.InClusterIPPool{}, &v1alpha2.GlobalInClusterIPPool{},
			&v1alpha2.InClusterPrefixPool{}, &v1alpha2.GlobalInClusterPrefixPool{}).
		WithObjects(objects...)
	for _, a := range addresses {
		b = b.WithObjects(&ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Name: a.Name, Namespace: namespace},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: a.Name},
				PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha2.GroupVersion.Group, Kind: kind, Name: poolName},
				Address:  a.Address,
				Prefix:   a.Prefix,
			},
		})
	}
	return b.Build()
}

func admit(ctx context.Context, req request) (response, error) {
	resp := response{ID: req.ID}
	object, kind, converted, err := toHub(req.Object)
	if err != nil {
		return resp, fmt.Errorf("object: %w", err)
	}
	if converted {
		resp.Converted = object
	}
	var oldObject json.RawMessage
	if len(req.OldObject) > 0 && string(req.OldObject) != "null" {
		if oldObject, _, _, err = toHub(req.OldObject); err != nil {
			return resp, fmt.Errorf("oldObject: %w", err)
		}
	}
	var meta struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	_ = json.Unmarshal(object, &meta)
	hub, hooks, err := hubObject(kind, fakeCluster(kind, meta.Metadata.Name, req.InUse))
	if err != nil {
		return resp, err
	}

	operation := admissionv1.Operation(req.Operation)
	ar := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       types.UID("oracle"),
		Operation: operation,
		Name:      meta.Metadata.Name,
		Namespace: meta.Metadata.Namespace,
	}}
	// The API server mutates the new object (never the old one, stored as it was admitted), then validates.
	if operation == admissionv1.Delete {
		ar.OldObject.Raw = object
	} else {
		ar.Object.Raw = object
		ar.OldObject.Raw = oldObject
		mutated := admission.WithCustomDefaulter(scheme, hub.DeepCopyObject(), hooks).Handle(ctx, ar)
		if !mutated.Allowed {
			fill(&resp, mutated)
			return resp, nil
		}
		if len(mutated.Patches) > 0 {
			ops, err := json.Marshal(mutated.Patches)
			if err != nil {
				return resp, err
			}
			patch, err := jsonpatch.DecodePatch(ops)
			if err != nil {
				return resp, err
			}
			if object, err = patch.Apply(object); err != nil {
				return resp, err
			}
		}
		resp.Defaulted = object
		ar.Object.Raw = object
	}
	fill(&resp, admission.WithCustomValidator(scheme, hub.DeepCopyObject(), hooks).Handle(ctx, ar))
	return resp, nil
}

func fill(resp *response, r admission.Response) {
	resp.Allowed = r.Allowed
	resp.Warnings = r.Warnings
	if r.Result == nil {
		return
	}
	resp.Code, resp.Reason, resp.Message = r.Result.Code, string(r.Result.Reason), r.Result.Message
	if r.Result.Details != nil {
		for _, c := range r.Result.Details.Causes {
			resp.Causes = append(resp.Causes, cause{Field: c.Field, Reason: string(c.Type), Message: c.Message})
		}
	}
}

func allocate(ctx context.Context, req request) (response, error) {
	resp := response{ID: req.ID}
	object, kind, _, err := toHub(req.Object)
	if err != nil {
		return resp, fmt.Errorf("object: %w", err)
	}
	pool, hooks, err := hubObject(kind, nil)
	if err != nil {
		return resp, err
	}
	if err := json.Unmarshal(object, pool); err != nil {
		return resp, fmt.Errorf("object: %w", err)
	}
	if err := hooks.Default(ctx, pool); err != nil {
		return resp, fmt.Errorf("default: %w", err)
	}
	if strings.HasPrefix(kind, "Global") {
		pool.SetNamespace("")
	} else {
		pool.SetNamespace(namespace)
	}
	c := fakeCluster(kind, pool.GetName(), req.InUse, pool)
	adapter := &controllers.InClusterProviderAdapter{Client: c}
	poolRef := ipamv1.IPPoolReference{APIGroup: v1alpha2.GroupVersion.Group, Kind: kind, Name: pool.GetName()}
	for _, s := range req.Steps {
		if s.Release != "" {
			address := &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: s.Release, Namespace: namespace}}
			result := stepResult{}
			if err := c.Delete(ctx, address); err != nil {
				result.Error = err.Error()
			}
			resp.Results = append(resp.Results, result)
			continue
		}
		claim := &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Name: s.Claim, Namespace: namespace},
			Spec:       ipamv1.IPAddressClaimSpec{PoolRef: poolRef},
		}
		resp.Results = append(resp.Results, claimAddress(ctx, c, adapter, claim))
	}
	request := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: pool.GetNamespace(), Name: pool.GetName()}}
	var reconcile func(context.Context, ctrl.Request) (ctrl.Result, error)
	switch kind {
	case "InClusterIPPool":
		reconcile = (&controllers.InClusterIPPoolReconciler{Client: c, Scheme: scheme}).Reconcile
	case "GlobalInClusterIPPool":
		reconcile = (&controllers.GlobalInClusterIPPoolReconciler{Client: c, Scheme: scheme}).Reconcile
	case "InClusterPrefixPool":
		reconcile = (&controllers.InClusterPrefixPoolReconciler{Client: c, Scheme: scheme}).Reconcile
	default:
		reconcile = (&controllers.GlobalInClusterPrefixPoolReconciler{Client: c, Scheme: scheme}).Reconcile
	}
	if _, err := reconcile(ctx, request); err != nil {
		return resp, fmt.Errorf("pool reconcile: %w", err)
	}
	if err := c.Get(ctx, request.NamespacedName, pool); err != nil {
		return resp, err
	}
	var status struct {
		Status struct {
			IPAddresses json.RawMessage `json:"ipAddresses"`
		} `json:"status"`
	}
	raw, _ := json.Marshal(pool)
	_ = json.Unmarshal(raw, &status)
	resp.Status = &status.Status.IPAddresses
	return resp, nil
}

// claimAddress runs the provider's claim handler for one claim, as its claim reconciler does: fetch the pool, fill
// the IPAddress, create it.
func claimAddress(ctx context.Context, c client.Client, adapter *controllers.InClusterProviderAdapter, claim *ipamv1.IPAddressClaim) stepResult {
	if err := c.Create(ctx, claim); err != nil {
		return stepResult{Error: err.Error()}
	}
	handler := adapter.ClaimHandlerFor(c, claim)
	if _, _, err := handler.FetchPool(ctx); err != nil {
		return stepResult{Error: err.Error()}
	}
	address := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: claim.Name, Namespace: claim.Namespace},
		Spec:       ipamv1.IPAddressSpec{ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name}, PoolRef: claim.Spec.PoolRef},
	}
	if _, err := handler.EnsureAddress(ctx, address); err != nil {
		return stepResult{Error: err.Error()}
	}
	if err := c.Create(ctx, address); err != nil {
		return stepResult{Error: err.Error()}
	}
	return stepResult{Address: address.Spec.Address, Prefix: address.Spec.Prefix, Gateway: address.Spec.Gateway}
}

func main() {
	ctrl.SetLogger(logr.Discard())
	ctx := context.Background()
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			var req request
			var resp response
			if uerr := json.Unmarshal(line, &req); uerr != nil {
				resp.Error = "request: " + uerr.Error()
			} else {
				var rerr error
				switch req.Op {
				case "admit":
					resp, rerr = admit(ctx, req)
				case "allocate":
					resp, rerr = allocate(ctx, req)
				default:
					rerr = fmt.Errorf("unknown op %q", req.Op)
				}
				resp.ID = req.ID
				if rerr != nil {
					resp.Error = rerr.Error()
				}
			}
			if eerr := enc.Encode(resp); eerr != nil {
				fmt.Fprintln(os.Stderr, "caip-oracle:", eerr)
				os.Exit(1)
			}
			// Flushed per line: the test writes a batch and reads the answers as they come.
			if ferr := out.Flush(); ferr != nil {
				os.Exit(1)
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "caip-oracle:", err)
			os.Exit(1)
		}
	}
}
