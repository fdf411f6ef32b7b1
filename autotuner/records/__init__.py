"""Moving records between the database and files: the run exchange format and fitted tables."""
