// Peer: a Go worker pool with aws-sdk-go-v2, as the case study's third
// version: one goroutine lists the bucket into a buffered channel, 2 x cores
// goroutines HEAD the keys, the HTTP client's idle pool raised to match.
// Prints one JSON line: {"peer", "objects", "with_metadata", "seconds", "workers"}.
//
// Usage: go-pool ENDPOINT BUCKET [WORKERS]
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: go-pool ENDPOINT BUCKET [WORKERS]")
		os.Exit(2)
	}
	endpoint, bucket := os.Args[1], os.Args[2]
	workers := 2 * runtime.NumCPU()
	if len(os.Args) > 3 {
		workers, _ = strconv.Atoi(os.Args[3])
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = workers * 2
	transport.MaxIdleConnsPerHost = workers * 2
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		HTTPClient:   &http.Client{Transport: transport},
		Credentials: credentials.NewStaticCredentialsProvider(
			os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), ""),
	})
	ctx := context.Background()
	started := time.Now()
	keys := make(chan string, 10000)
	go func() {
		defer close(keys)
		pages := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				fmt.Fprintln(os.Stderr, "list:", err)
				os.Exit(1)
			}
			for _, o := range page.Contents {
				keys <- *o.Key
			}
		}
	}()
	var objects, withMetadata atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range keys {
				head, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
				if err != nil {
					fmt.Fprintln(os.Stderr, "head:", err)
					os.Exit(1)
				}
				objects.Add(1)
				if len(head.Metadata) > 0 {
					withMetadata.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	out, _ := json.Marshal(map[string]any{
		"peer": "go-pool", "objects": objects.Load(), "with_metadata": withMetadata.Load(),
		"seconds": time.Since(started).Seconds(), "workers": workers,
	})
	fmt.Println(string(out))
}
