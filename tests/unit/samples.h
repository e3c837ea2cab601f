// samples.h — deterministic sample records for codec tests and the committed hex fixtures.
// Every op and every value kind appears in SampleEnvelope(). Never random: fixtures depend on it.
#pragma once

#include "trellara/record/envelope.h"

namespace trellara::testing {

RelationInfo SampleOrders();     // public.orders (id key, note text, payload bytea-as-text, big text)
RelationInfo SampleLineItems();  // "Sales"."line ""items""" (composite key)
Envelope SampleEnvelope();       // insert, update (unchanged toast), key update, delete, truncate, message, ddl
Chunk SampleChunk(uint32_t seq);
Manifest SampleManifest();       // binds SampleChunk(0) and SampleChunk(1)
CommitMarker SampleCommitMarker();

}  // namespace trellara::testing
