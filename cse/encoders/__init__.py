"""The encoders the methods train in place of :class:`cse.modeling.CSEModel`'s backbone + pooler, one
module each: SARCSE's (:mod:`~cse.encoders.autoencoding`, over :mod:`~cse.encoders.textcnn`, with
its sentence-transformers module :mod:`~cse.encoders.sarcse_embedding`), SG-BERT's
(:mod:`~cse.encoders.self_guided`) and V-advCSE's training head (:mod:`~cse.encoders.mlp_head`).
They import the model, pooling and loss modules below the trainer, never the trainer nor the methods,
so that :func:`cse.modeling.load_model` loads an export without either."""
