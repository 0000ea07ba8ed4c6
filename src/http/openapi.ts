// The top of the OpenAPI 3.1 document; paths and schemas come from the routes' TypeBox schemas.
export const openApiInfo = {
  openapi: '3.1.0',
  info: {
    title: 'Postwire API',
    version: '1.0.0',
    description:
      'Self-hostable email API: templates, sending and signed webhooks. Every /v1 route takes `Authorization: Bearer <API_KEY>`.',
  },
  servers: [{ url: '/' }],
  components: {
    securitySchemes: { bearerAuth: { type: 'http' as const, scheme: 'bearer' } },
  },
  security: [{ bearerAuth: [] }],
};
