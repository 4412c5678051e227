// Command client-go-informer is the Go side of nodewright's cache-memory benchmark: it fills
// a client-go shared informer with the Pods of one namespace and reports how much memory the
// cache holds, as the RSS delta and the Go heap delta after garbage collection.
//
// With -transform it strips metadata.managedFields before caching (SetTransform), as
// controller-runtime users do with cache.TransformStripManagedFields. It prints one JSON line.
//
// With -workqueue-ops N it instead runs the work-queue micro-benchmark against client-go's
// rate-limiting work queue (the one controller-runtime uses): one producer adds N keys drawn
// round-robin from -workqueue-keys names while -workqueue-workers goroutines Get and Done.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "path to the kubeconfig")
	namespace := flag.String("namespace", "default", "namespace whose Pods to cache")
	transform := flag.Bool("transform", false, "strip metadata.managedFields before caching")
	expect := flag.Int("expect", 0, "wait until the cache holds this many Pods")
	workqueueOps := flag.Int("workqueue-ops", 0, "run the work-queue benchmark with this many adds")
	workqueueKeys := flag.Int("workqueue-keys", 10000, "distinct keys of the work-queue benchmark")
	workqueueWorkers := flag.Int("workqueue-workers", 8, "workers of the work-queue benchmark")
	flag.Parse()
	if *workqueueOps > 0 {
		benchWorkqueue(*workqueueOps, *workqueueKeys, *workqueueWorkers)
		return
	}

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("loading kubeconfig", err)
	}
	config.QPS = -1
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("creating clientset", err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, informers.WithNamespace(*namespace))
	informer := factory.Core().V1().Pods().Informer()
	if *transform {
		if err := informer.SetTransform(stripManagedFields); err != nil {
			fail("setting transform", err)
		}
	}
	baselineRSS, baselineHeap := settle()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := time.Now()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		fail("syncing", fmt.Errorf("cache did not sync"))
	}
	for len(informer.GetStore().ListKeys()) < *expect {
		time.Sleep(50 * time.Millisecond)
	}
	syncSeconds := time.Since(started).Seconds()
	count := len(informer.GetStore().ListKeys())
	rss, heap := settle()
	result, _ := json.Marshal(map[string]any{
		"objects":         count,
		"baseline_rss":    baselineRSS,
		"rss":             rss,
		"baseline_heap":   baselineHeap,
		"heap":            heap,
		"sync_seconds":    syncSeconds,
		"peak_rss":        statusBytes("VmHWM"),
		"transform":       *transform,
		"go_version":      runtime.Version(),
		"gomaxprocs":      runtime.GOMAXPROCS(0),
		"managed_objects": "pods",
	})
	fmt.Println(string(result))
}

func benchWorkqueue(operations, distinct, workers int) {
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "bench"},
	)
	keys := make([]string, distinct)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench/widget-%06d", i)
	}
	var gets atomic.Int64
	var group sync.WaitGroup
	started := time.Now()
	for range workers {
		group.Add(1)
		go func() {
			defer group.Done()
			for {
				item, shutdown := queue.Get()
				if shutdown {
					return
				}
				queue.Done(item)
				gets.Add(1)
			}
		}()
	}
	for i := range operations {
		queue.Add(keys[i%distinct])
	}
	queue.ShutDown() // workers still drain what is queued, then Get reports shutdown
	group.Wait()
	seconds := time.Since(started).Seconds()
	result, _ := json.Marshal(map[string]any{
		"workers": workers,
		"adds":    operations,
		"gets":    gets.Load(),
		"seconds": seconds,
	})
	fmt.Println(string(result))
}

func stripManagedFields(object any) (any, error) {
	if pod, ok := object.(*corev1.Pod); ok {
		pod.ManagedFields = nil
	}
	return object, nil
}

// settle collects garbage, returns freed memory to the OS, and reads RSS and live heap bytes.
func settle() (int64, uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return statusBytes("VmRSS"), stats.HeapAlloc
}

// statusBytes reads one "kB" field of /proc/self/status, in bytes.
func statusBytes(field string) int64 {
	file, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer file.Close()
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, field+":") {
			parts := strings.Fields(line)
			value, _ := strconv.ParseInt(parts[1], 10, 64)
			return value * 1024
		}
	}
	return -1
}

func fail(what string, err error) {
	fmt.Fprintln(os.Stderr, what+":", err)
	os.Exit(1)
}
