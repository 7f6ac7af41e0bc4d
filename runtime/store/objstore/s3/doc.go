// Package s3 is an objstore.Store on an S3-compatible bucket, through
// minio-go v7. All keys live under a prefix inside the bucket, so many
// stores can share one bucket.
//
// Guarantees:
//   - Put is one single-part PUT: S3 makes it atomic.
//   - Create-only sends If-None-Match: * (PutObjectOptions.SetMatchETagExcept)
//     and If-Match sends If-Match: <etag> (SetMatchETag); the server decides,
//     so racing writers in any number of processes get exactly one winner.
//     A 412 is ErrPrecondition; If-Match on a missing key (AWS answers 404)
//     is ErrPrecondition too. 404/NoSuchKey elsewhere is ErrNotExist.
//   - Failed attempts are retried with exponential backoff and jitter on
//     5xx, 429, transport errors, attempt timeouts and 409
//     ConditionalRequestConflict, at most Config.MaxAttempts requests per
//     call, and never past ctx. minio-go's own retries are off so this
//     package knows when an attempt's outcome is unknown: when a retried
//     conditional PUT then fails its precondition, one HEAD checks whether
//     the object holds exactly the PUT's bytes (ETag = MD5), and if so the
//     Put succeeded.
//   - List sends ListObjectsV2 with StartAfter and MaxKeys = limit.
//
// Cost in requests: Get, Head, Put, Delete and List are one request each,
// plus one per retry; the lost-response check adds one HEAD. New makes no
// request. Put's ModTime is the local clock (a PUT response carries none).
//
// What it does not do: multipart uploads (objects are single PUTs, so at
// most 5 GiB), server-side encryption settings, or creating the bucket.
// The server must support conditional PUTs (AWS S3 since 2024, MinIO,
// versitygw >= 1.8).
package s3
