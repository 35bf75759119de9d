"""Reads a TensorBoard log folder with TensorBoard's own loader (EventAccumulator, what its
server ingests) and prints {"scalars": {tag: [[step, value], ...]}, "text": {tag: [[step,
text], ...]}, "text_plugin_tags": [...]} as JSON. Corrupt records fail here, not silently."""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator as ea

acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
acc.Reload()
tags = acc.Tags()
out = {"scalars": {}, "text": {}, "text_plugin_tags": sorted(acc.PluginTagToContent("text"))}
for tag in tags["scalars"]:
    out["scalars"][tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
for tag in tags["tensors"]:
    out["text"][tag] = [[e.step, e.tensor_proto.string_val[0].decode()] for e in acc.Tensors(tag)]
print(json.dumps(out))
