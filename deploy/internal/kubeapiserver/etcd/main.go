// Command etcd runs a single-member etcd (go.etcd.io/etcd/server/v3/embed) for the
// kube-apiserver that deploy/kubernetes's apply test starts. It listens on the
// loopback URLs it is given only and stops on SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
}

func run() error {
	dataDir := flag.String("data-dir", "", "directory for etcd's data (required)")
	client := flag.String("listen-client-url", "http://127.0.0.1:2379", "URL clients (kube-apiserver) connect to")
	peer := flag.String("listen-peer-url", "http://127.0.0.1:2380", "URL of the single member's peer listener")
	flag.Parse()
	if *dataDir == "" {
		return fmt.Errorf("-data-dir is required")
	}
	clientURL, err := loopbackURL("-listen-client-url", *client)
	if err != nil {
		return err
	}
	peerURL, err := loopbackURL("-listen-peer-url", *peer)
	if err != nil {
		return err
	}

	cfg := embed.NewConfig()
	cfg.Name = "apply-test"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.Name + "=" + peerURL.String()
	cfg.LogLevel = "warn"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		return fmt.Errorf("not ready after 60s")
	}
	fmt.Println("etcd: ready on", clientURL)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-stop:
		fmt.Println("etcd: stopping on", s)
		return nil
	case err := <-e.Err():
		return fmt.Errorf("serve: %w", err)
	}
}

// loopbackURL parses an http URL on 127.0.0.1: the test's etcd is never reachable
// from another host.
func loopbackURL(name, s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", name, s, err)
	}
	if u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" {
		return nil, fmt.Errorf("%s %q: want http://127.0.0.1:PORT", name, s)
	}
	return u, nil
}
