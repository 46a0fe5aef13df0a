// Package kafka provides the `kafka` source and sink on github.com/IBM/sarama.
//
// The source assigns partitions to its subtasks itself (no consumer-group
// rebalancing), keeps the offsets in eddy's checkpoints and emits watermarks
// per partition. The sink writes one Kafka transaction per checkpoint and
// sink subtask: pre-committed at the barrier, committed when
// the checkpoint completes, and committed again from the checkpoint after a
// crash, from a small pool of transactional ids so that a new transaction
// never fences one a pending checkpoint still has to commit.
//
// It imports pipeline and connectors/codec only.
package kafka
