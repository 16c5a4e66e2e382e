"""The repository as data: its folders and files (repository, changes), kustomize builds and their
cache, the raw job-folder scan, the objects a render yields (rendered), the facts a cluster declares
(declared: clusters/<cluster>/cluster.yaml) and those read from its render (rendered_facts),
NetworkAttachmentDefinitions, schemas, and the problems the checks report. Imports nothing else of
trainyard.repo."""
