package kv_test

import (
	"context"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

func ExampleDB_Update() {
	ctx := context.Background()
	db, err := kv.Open(ctx, mem.New(), kv.Options{Prefix: "db"})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	// Move a job from "pending" to "running" and count it, atomically and
	// durably; Update retries fn if another commit got in between.
	_ = db.Update(ctx, func(tx *kv.Tx) error { return tx.Put([]byte("pending/job1"), []byte("{}")) })
	err = db.Update(ctx, func(tx *kv.Tx) error {
		v, err := tx.Get(ctx, []byte("pending/job1"))
		if err != nil {
			return err
		}
		if err := tx.Delete([]byte("pending/job1")); err != nil {
			return err
		}
		if err := tx.Put([]byte("running/job1"), v); err != nil {
			return err
		}
		return tx.Add([]byte("stats/running"), 1)
	})
	if err != nil {
		panic(err)
	}
	_ = db.Scan(ctx, kv.Range{}, func(k, v []byte) (bool, error) {
		fmt.Printf("%s\n", k)
		return true, nil
	})
	// Output:
	// running/job1
	// stats/running
}
