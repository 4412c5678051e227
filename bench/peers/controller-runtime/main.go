// Command controller-runtime-widget is the controller-runtime contender of nodewright's
// benchmarks: a reconciler for bench.nodewright.io/v1alpha1 Widgets, written against
// unstructured objects, that sets status.observedGeneration and a Ready condition through a
// merge patch of the status subresource, exactly as the nodewright and kopf contenders do.
//
// It watches one namespace, reads Widgets from its cache, serves no metrics or probes, runs
// without leader election and without client-side rate limiting (QPS -1), and prints one JSON line with its reconcile and
// patch counts when SIGTERM stops it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

var widgetKind = schema.GroupVersionKind{Group: "bench.nodewright.io", Version: "v1alpha1", Kind: "Widget"}

type widgetReconciler struct {
	client     client.Client
	reconciles atomic.Int64
	patches    atomic.Int64
}

func (r *widgetReconciler) Reconcile(ctx context.Context, request reconcile.Request) (reconcile.Result, error) {
	r.reconciles.Add(1)
	widget := &unstructured.Unstructured{}
	widget.SetGroupVersionKind(widgetKind)
	if err := r.client.Get(ctx, request.NamespacedName, widget); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	generation := widget.GetGeneration()
	observed, _, _ := unstructured.NestedInt64(widget.Object, "status", "observedGeneration")
	if observed == generation && readyTrue(widget) {
		return reconcile.Result{}, nil
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{
		"observedGeneration": generation,
		"conditions": []any{map[string]any{
			"type":               "Ready",
			"status":             "True",
			"reason":             "Reconciled",
			"message":            "Widget reconciled",
			"observedGeneration": generation,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}},
	}})
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.client.Status().Patch(ctx, widget, client.RawPatch(types.MergePatchType, body)); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.patches.Add(1)
	return reconcile.Result{}, nil
}

func readyTrue(widget *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(widget.Object, "status", "conditions")
	for _, item := range conditions {
		condition, ok := item.(map[string]any)
		if ok && condition["type"] == "Ready" && condition["status"] == "True" {
			return true
		}
	}
	return false
}

func main() {
	namespace := flag.String("namespace", "default", "namespace whose Widgets to reconcile")
	workers := flag.Int("workers", 1, "MaxConcurrentReconciles")
	flag.Parse()

	ctrl.SetLogger(zap.New())
	config, err := ctrl.GetConfig() // --kubeconfig (registered by controller-runtime) or $KUBECONFIG
	if err != nil {
		fmt.Fprintln(os.Stderr, "loading kubeconfig:", err)
		os.Exit(1)
	}
	config.QPS = -1 // no client-side rate limit, like the Python contenders
	manager, err := ctrl.NewManager(config, ctrl.Options{
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
		// Serve reads of unstructured objects from the cache, as for typed ones (the default
		// client reads unstructured objects live from the API server).
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating manager:", err)
		os.Exit(1)
	}
	reconciler := &widgetReconciler{client: manager.GetClient()}
	widget := &unstructured.Unstructured{}
	widget.SetGroupVersionKind(widgetKind)
	err = ctrl.NewControllerManagedBy(manager).
		For(widget).
		Named("widget").
		WithOptions(controller.Options{MaxConcurrentReconciles: *workers}).
		Complete(reconciler)
	if err != nil {
		fmt.Fprintln(os.Stderr, "building controller:", err)
		os.Exit(1)
	}
	if err := manager.Start(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "manager stopped:", err)
		os.Exit(1)
	}
	stats, _ := json.Marshal(map[string]int64{
		"reconciles": reconciler.reconciles.Load(),
		"patches":    reconciler.patches.Load(),
	})
	fmt.Println(string(stats))
}
