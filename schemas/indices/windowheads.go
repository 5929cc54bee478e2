package indices

// KindPartitionHead is the head (EncodeHead, WindowHeadNodes nodes) of a
// part-hour window's partition tree: one per type, Kafka partition and
// minute or 10-minute window, written by the rollup with the window's
// other documents, value the tree's total. The edges of a fleet-wide
// flame graph whose hours come from hour heads read these instead of the
// window trees, under the same proof (schemas/opensearch.md, "Window
// heads"). Minute heads are written whether or not minute trees are.
const KindPartitionHead = "partition_head"

// WindowHeadNodes is the number of nodes a window head keeps: as many as
// an hour head, so that the nodes a flame graph of the query's default
// max_nodes (5000) shows are kept by every window head of a partition
// whose hosts weigh them differently from the fleet.
const WindowHeadNodes = HeadNodes
