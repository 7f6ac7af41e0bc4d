package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func main() {
	wait := flag.Duration("wait", 30*time.Second, "how long to wait for the server to answer")
	flag.Parse()
	if err := run(*wait); err != nil {
		fmt.Fprintln(os.Stderr, "s3setup:", err)
		os.Exit(1)
	}
}

func run(wait time.Duration) error {
	endpoint, bucket := os.Getenv("TQW_TEST_S3_ENDPOINT"), os.Getenv("TQW_TEST_S3_BUCKET")
	ak, sk := os.Getenv("TQW_TEST_S3_ACCESS_KEY"), os.Getenv("TQW_TEST_S3_SECRET_KEY")
	if endpoint == "" || bucket == "" || ak == "" || sk == "" {
		return fmt.Errorf("set TQW_TEST_S3_ENDPOINT, TQW_TEST_S3_BUCKET, TQW_TEST_S3_ACCESS_KEY and TQW_TEST_S3_SECRET_KEY")
	}
	c, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(ak, sk, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		exists, err := c.BucketExists(ctx, bucket)
		if err == nil {
			if exists {
				return nil
			}
			return c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"})
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("S3 server at %s did not answer within %v: %w", endpoint, wait, err)
		case <-tick.C:
		}
	}
}
