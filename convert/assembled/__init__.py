"""A composite's artifacts run together, as the model is deployed, against the library's own assembled model.

One module per kind of composite (convert/composites.py): each check is a function
``check(folder, artifacts, *, precision, seed, trust_code) -> AssembledCheck`` that the worker calls with the source
folder and each component's artifact (component name -> path). It loads the library's model from the folder itself
(with the same refusals as the component's source), runs the artifacts in ONNX Runtime on the CPU, and returns one
check: passed, failed with where the two parted and which components alone fail it, or skipped with why.
"""
