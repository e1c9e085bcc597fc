// Anchors libraries whose other sources are globbed and may be empty.
