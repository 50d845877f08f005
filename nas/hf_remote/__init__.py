"""The search-free runtime as ``transformers`` remote code (``auto_map``).

:mod:`configuration_nas_graph` and :mod:`modeling_nas_graph` are the files an export
carries so that stock ``transformers`` loads it with ``trust_remote_code=True``;
:mod:`nas.remote_code` copies them, with the op modules they need, into the export
folder with every ``nas`` import rewritten to a relative one (the folder works without
this package installed). Inside the package they are ordinary modules, tested as such.
"""
