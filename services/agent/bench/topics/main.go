// Command topics creates or deletes the four topics under a prefix, so the
// benchmark harness can run the agent against the shared broker without
// touching anyone else's topics: topics create|delete PREFIX.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/stackstream/stackstream/pkg/kafka"
	"github.com/stackstream/stackstream/schemas/record"
)

func main() {
	if len(os.Args) != 3 || (os.Args[1] != "create" && os.Args[1] != "delete") {
		fmt.Fprintln(os.Stderr, "usage: topics create|delete PREFIX (broker from STACKSTREAM_KAFKA_BROKERS, default 127.0.0.1:9092)")
		os.Exit(2)
	}
	brokers := os.Getenv("STACKSTREAM_KAFKA_BROKERS")
	if brokers == "" {
		brokers = "127.0.0.1:9092"
	}
	if err := run(os.Args[1], os.Args[2], brokers); err != nil {
		fmt.Fprintln(os.Stderr, "topics:", err)
		os.Exit(1)
	}
}

func run(op, prefix, brokers string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := record.TopicsFor(prefix)
	if op == "delete" {
		_, err := adm.DeleteTopics(ctx, topics.All()...)
		return err
	}
	_, err = kafka.EnsureTopics(ctx, adm, kafka.Specs(topics, 1, 1))
	return err
}
