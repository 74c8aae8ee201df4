// gpuops-nvidia-nri-plugin: the NVIDIA Container Toolkit's NRI plugin, on its own.
//
// The toolkit ships its NRI plugin (package nri of its Go module) only inside nvidia-ctk-installer, which installs the
// toolkit into its own directory before it starts the plugin. This main runs the same package and nothing else, as a
// node's systemd unit: it injects the CDI devices named by a pod's nvidia.cdi.k8s.io/container.<name>,
// nvidia.cdi.k8s.io/pod or nvidia.cdi.k8s.io annotation (a comma-separated list), and the devices of
// management.nvidia.com/gpu only into pods of the namespaces given. Its flags are the installer's (--nri-socket,
// --nri-plugin-index, --nri-namespace, --nri-management-cdi-device-namespaces), with the installer's defaults.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk-installer/container/runtime/nri"
	nriapi "github.com/containerd/nri/pkg/api"
)

// version is set at build time (-X main.version=...): the toolkit module's version this was built against.
var version = "unknown"

// logger is the toolkit's logger.Interface (an internal package: satisfied by its methods), on the standard logger.
type logger struct{ debug bool }

func (l logger) Debugf(format string, args ...interface{}) {
	if l.debug {
		log.Printf("DEBUG "+format, args...)
	}
}
func (l logger) Tracef(format string, args ...interface{}) { l.Debugf(format, args...) }
func (logger) Infof(format string, args ...interface{})    { log.Printf("INFO "+format, args...) }
func (logger) Warningf(format string, args ...interface{}) { log.Printf("WARNING "+format, args...) }
func (logger) Errorf(format string, args ...interface{})   { log.Printf("ERROR "+format, args...) }

type options struct {
	socket     string
	index      uint
	namespaces []string
	debug      bool
}

// parse reads the flags; an index outside [0, 99] or no namespace at all is refused, as by the installer.
func parse(args []string) (options, error) {
	var o options
	var namespace, extra string
	fs := flag.NewFlagSet("gpuops-nvidia-nri-plugin", flag.ContinueOnError)
	fs.StringVar(&o.socket, "nri-socket", nriapi.DefaultSocketPath, "the runtime's NRI socket")
	fs.UintVar(&o.index, "nri-plugin-index", 10, "the plugin's index in NRI (0-99): the order among the node's plugins")
	fs.StringVar(&namespace, "nri-namespace", "", "the namespace whose pods may get management.nvidia.com/gpu devices")
	fs.StringVar(&extra, "nri-management-cdi-device-namespaces", "", "more such namespaces, comma-separated")
	fs.BoolVar(&o.debug, "debug", false, "log each container's devices")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *showVersion {
		fmt.Printf("gpuops-nvidia-nri-plugin (nvidia-container-toolkit %s)\n", version)
		os.Exit(0)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.index > 99 {
		return o, fmt.Errorf("--nri-plugin-index must be in the range [0,99], got %d", o.index)
	}
	for _, ns := range append([]string{namespace}, strings.Split(extra, ",")...) {
		if ns = strings.TrimSpace(ns); ns != "" {
			o.namespaces = append(o.namespaces, ns)
		}
	}
	if len(o.namespaces) == 0 {
		return o, fmt.Errorf("--nri-namespace is empty: name the namespace of the GPU operands")
	}
	return o, nil
}

func main() {
	log.SetFlags(0)
	o, err := parse(os.Args[1:])
	if err != nil {
		log.Fatalf("ERROR %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	plugin := nri.NewPlugin(ctx, logger{debug: o.debug}, o.namespaces)
	log.Printf("INFO starting the NRI plugin (toolkit %s) on %s, index %02d, management namespaces %v", version, o.socket,
		o.index, o.namespaces)
	if err := plugin.Start(ctx, o.socket, fmt.Sprintf("%02d", o.index)); err != nil {
		log.Fatalf("ERROR %v", err)
	}
	<-ctx.Done()
	log.Printf("INFO stopping the NRI plugin")
	plugin.Stop()
}
